"""A/B of the cluster commands with a client-certificate kubeconfig and with an exec-plugin kubeconfig (the
EKS / GKE / AKS way), on one test control plane: another tree (e.g. `git archive BASE | tar -x -C BASE`)
against this one, interleaved fresh processes, medians of wall and CPU; plus, per command, the TCP connections
it opens to the API server and whether it imported the kubernetes package.

The plugin is a Python script returning the admin's client certificate (client.authentication.k8s.io/v1); its
own run time is measured alone, as the target is "at most the plugin's run time above the certificate case".
The job is bench_status.py's (2 Running pods on kwok nodes, serving log lines).

    .venv/bin/python benchmarks/ab_exec.py --base BASE [--runs 10]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
# Runs the CLI in a fresh process and reports on stderr's last line: connections opened, kubernetes imported.
PROBE = """
import json, socket, sys
opened = []
connect = socket.socket.connect
def counting(self, address):
    opened.append(address)
    return connect(self, address)
socket.socket.connect = counting
from kubetrain.cli.main import cli
try:
    cli(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"connections": len(opened), "kubernetes": "kubernetes" in sys.modules, "exit": code}),
      file=sys.stderr)
"""


def exec_kubeconfig(admin: Path, tmp: Path) -> Path:
    data = yaml.safe_load(admin.read_text())
    user = data["users"][0]["user"]
    cert, key = (base64.b64decode(user[k]).decode() for k in ("client-certificate-data", "client-key-data"))
    plugin = tmp / "cert-plugin"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": cert, "clientKeyData": key}}
    plugin.write_text(f"#!{sys.executable} -S\nprint({json.dumps(json.dumps(credential))})\n")
    plugin.chmod(0o755)
    data["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                         "command": str(plugin), "interactiveMode": "Never"}}
    path = tmp / "exec-kubeconfig"
    path.write_text(yaml.safe_dump(data))
    return path


def probe(tree: str, args: list[str], kubeconfig: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": tree, "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True,
                          cwd=tree, check=False)
    return dict(json.loads(done.stderr.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", required=True)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks import ab_cli
    from benchmarks.bench_cli import ensure_bytecode, load_average
    from benchmarks.bench_status import bench_job
    from tests.testenv.controlplane import ControlPlane
    from tests.testenv.specs import write_spec

    trees = {"base": args.base, "branch": str(REPO)}
    for tree in trees.values():
        ensure_bytecode(Path(tree))
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        bench_job(cp, Path(tmp))
        spec = write_spec(Path(tmp), "other", nodes=1)
        configs = {"cert": cp.kubeconfig, "exec": exec_kubeconfig(cp.kubeconfig, Path(tmp))}
        commands = {"status": ["status", "bench"], "list": ["list"], "logs --tail 5": ["logs", "bench", "--tail", "5"],
                    "submit --dry-run=server": ["submit", "-f", str(spec), "--dry-run=server"],
                    "gpu": ["gpu", "bench"]}
        kubetrain = str(Path(sys.executable).parent / "kubetrain")
        plugin_ms = statistics.median(_time([str(Path(tmp) / "cert-plugin")]) for _ in range(args.runs))
        before = load_average()
        rows = []
        for name, argv in commands.items():
            for kind, config in configs.items():
                os.environ["KUBECONFIG"] = str(config)  # ab_cli.once passes os.environ on
                case = f"{name} ({kind})"
                samples = ab_cli.interleaved({case: [kubetrain, *argv]}, trees, args.runs, warmup=1)
                info = {label: probe(tree, argv, config) for label, tree in trees.items()}
                rows.append((case, samples, info))
    print(f"medians of {args.runs}, interleaved; {before} before, {load_average()} after; "
          f"the plugin alone: {plugin_ms:.0f} ms")
    print("| `kubetrain ...` | base wall | branch wall | base CPU | branch CPU | connections base / branch "
          "| kubernetes imported base / branch |\n|---|---|---|---|---|---|---|")
    for case, samples, info in rows:
        cells = [statistics.median(s[i] for s in samples[(case, label)]) for i in (0, 1) for label in trees]
        print(f"| {case} | " + " | ".join(f"{v:.0f} ms" for v in cells)
              + f" | {info['base']['connections']} / {info['branch']['connections']}"
              + f" | {_yes(info['base']['kubernetes'])} / {_yes(info['branch']['kubernetes'])} |")


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


if __name__ == "__main__":
    main()
