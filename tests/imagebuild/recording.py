"""Recording fake executables (docker, podman, kind, kubectl, helm, nvidia-smi...) for tests.

Each fake is a tiny Python script in a directory that becomes the whole PATH. Every call appends one JSON line
{argv, env, cwd, stdin} to a log; what it prints and its exit code come from rules the test sets:
the first rule whose argv prefix matches answers, with a list of responses consumed in order (the last one
repeats). An unmatched call of a subcommand the real tool has prints nothing and exits 0; any other call
fails loudly, as the real tool would (exit 1, "unknown command"), so a misspelt command line kubetrain
builds can't pass a test. A `build` call also snapshots the context it was given.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

RECORDED_ENV = ("KUBECONFIG", "DOCKER_BUILDKIT", "KIND_EXPERIMENTAL_PROVIDER", "HOME")

# The top-level subcommands of each real tool (from their --help), or flags for tools without any.
_CONTAINER_CLI = ["build", "buildx", "image", "images", "inspect", "load", "manifest", "pull", "push", "rmi",
                  "save", "tag", "version", "info", "run", "exec", "ps", "rm", "login", "system"]
KNOWN_COMMANDS: dict[str, list[str]] = {
    "docker": _CONTAINER_CLI,
    "podman": _CONTAINER_CLI,
    "nerdctl": [*_CONTAINER_CLI, "namespace"],
    "kind": ["build", "create", "delete", "export", "get", "load", "version", "completion"],
    "kubectl": ["apply", "create", "delete", "get", "describe", "wait", "rollout", "label", "patch",
                "version", "cluster-info", "config", "logs", "exec", "auth", "api-resources"],
    "helm": ["repo", "install", "upgrade", "uninstall", "list", "status", "version", "template", "dependency"],
    "nvidia-ctk": ["runtime", "cdi", "config", "system", "--version"],
    "nvidia-smi": ["-L", "--query-gpu", "--list-gpus"],
    "ctr": ["--address", "-a", "--namespace", "-n", "images", "image", "i", "version", "containers", "tasks"],
    "skopeo": ["copy", "inspect", "list-tags", "--version"],
}

SCRIPT = r'''#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
argv = [name, *sys.argv[1:]]
control = json.loads(open(os.environ["FAKEBIN_CONTROL"]).read())
stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
entry = {{"argv": argv, "cwd": os.getcwd(), "stdin": stdin,
          "env": {{k: os.environ[k] for k in control["env_keys"] if k in os.environ}}}}
if len(argv) > 2 and argv[1] == "build" and os.path.isdir(argv[-1]):
    root = argv[-1]
    files = []
    for here, dirs, names in os.walk(root):
        for n in dirs + names:
            full = os.path.join(here, n)
            rel = os.path.relpath(full, root)
            if not os.path.isdir(full) or os.path.islink(full) or not os.listdir(full):
                files.append(rel + ("/" if os.path.isdir(full) and not os.path.islink(full) else ""))
    entry["context_files"] = sorted(files)
    if "-f" in argv:
        entry["dockerfile"] = open(argv[argv.index("-f") + 1]).read()
    req = os.path.join(root, "kubetrain", "requirements.txt")
    if os.path.exists(req):
        entry["requirements"] = open(req).read()
with open(os.environ["FAKEBIN_LOG"], "a") as log:
    log.write(json.dumps(entry) + "\n")
state_path = os.environ["FAKEBIN_CONTROL"] + ".state"
state = json.loads(open(state_path).read()) if os.path.exists(state_path) else {{}}
for index, rule in enumerate(control["rules"]):
    if argv[: len(rule["prefix"])] == rule["prefix"]:
        used = state.get(str(index), 0)
        state[str(index)] = used + 1
        open(state_path, "w").write(json.dumps(state))
        response = rule["responses"][min(used, len(rule["responses"]) - 1)]
        sys.stdout.write(response.get("stdout", ""))
        sys.stderr.write(response.get("stderr", ""))
        sys.exit(response.get("exit", 0))
known = control["known"].get(name)
# Flags may come first (`kubectl --context X apply`): any word of the tool's vocabulary will do.
if known is not None and argv[1:] and not any(a.split("=")[0] in known for a in argv[1:]):
    sys.stderr.write(f"{{name}}: unknown command {{argv[1:]!r}} (recording fake: add a rule in the test)\n")
    sys.exit(1)
'''


class FakeBin:
    """A PATH of recording fakes. `on()` sets answers; `calls()` / `argvs()` read what was run."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "fakebin"
        self.dir.mkdir(parents=True)
        self.log = root / "fakebin.log.jsonl"
        self.control = root / "fakebin.control.json"
        self.rules: list[dict[str, Any]] = []
        self._save()

    def install(self, *names: str) -> FakeBin:
        for name in names:
            path = self.dir / name
            path.write_text(SCRIPT.format(python=sys.executable))
            path.chmod(0o755)
        return self

    def on(self, *prefix: str, exit: int = 0, stdout: str = "", stderr: str = "",
           responses: list[dict[str, Any]] | None = None) -> FakeBin:
        """Answer calls whose argv starts with `prefix` (program name first). Earlier rules win."""
        answers = responses or [{"exit": exit, "stdout": stdout, "stderr": stderr}]
        self.rules.append({"prefix": list(prefix), "responses": answers})
        self._save()
        return self

    def clear(self) -> FakeBin:
        """Forget every rule (and the answer counters), keeping the log."""
        self.rules = []
        Path(str(self.control) + ".state").unlink(missing_ok=True)
        self._save()
        return self

    def env(self) -> dict[str, str]:
        return {"PATH": str(self.dir), "FAKEBIN_LOG": str(self.log), "FAKEBIN_CONTROL": str(self.control)}

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def argvs(self) -> list[list[str]]:
        return [call["argv"] for call in self.calls()]

    def reset_log(self) -> None:
        self.log.unlink(missing_ok=True)
        Path(str(self.control) + ".state").unlink(missing_ok=True)

    def _save(self) -> None:
        self.control.write_text(json.dumps({"rules": self.rules, "env_keys": list(RECORDED_ENV),
                                                "known": KNOWN_COMMANDS}))


def activate(fakebin: FakeBin, monkeypatch: Any) -> None:
    """Make the fakes the only executables on PATH for this test (library calls and CliRunner alike)."""
    for key, value in fakebin.env().items():
        monkeypatch.setenv(key, value)
    assert os.environ["PATH"] == str(fakebin.dir)
