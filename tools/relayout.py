"""Issue 28's layout change, as a re-runnable script (tools/relayout.sh runs it from the repository root).

1. Moves files with `git mv` (history follows): each module of tools/relayout-map.txt, every file under a package
   line (kubetrain/spec -> kubetrain/jobspec), and any other kubetrain/client/*.py -> kubetrain/jobs/.
2. Rewrites the old names wherever they are written: imports (`from kubetrain.client import jobs, watch` is split
   per new package), dotted names in strings and docs, file paths (kubetrain/client/rest.py, client/rest.py).

Idempotent: moved files are skipped, new names never match the old patterns. Re-run it after merging branches
that add files importing the old paths.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path.cwd()
OLD_CLIENT, DEFAULT_PKG, BARE_CLIENT = "kubetrain.client", "kubetrain.jobs", "kubetrain.kube"
REWRITE = ("kubetrain", "tests", "benchmarks", "docs", "examples", "manifests", "images", ".ci", ".github")
REWRITE_FILES = ("pyproject.toml", "Makefile", "README.md", ".importlinter", ".pre-commit-hooks.yaml")
SKIP = ("tools/relayout.py", "tools/relayout.sh", "tools/relayout-map.txt")
INIT_DOCS = {
    "kubetrain.kube": "The wire: one REST client (transport, kubeconfig, credentials, retries, typed errors, "
                      "watches) and the vocabulary of Kubernetes objects.",
    "kubetrain.cluster": "Cluster readiness: doctor, preflight, fit, admission webhooks, cloud detection.",
    "kubetrain.queues": "Kueue: Workloads and the quota a LocalQueue leads to.",
    "kubetrain.jobs": "The job verbs: find, apply, status, logs, gpu, delete of PyTorchJobs and TrainJobs.",
}


def read_map() -> tuple[dict[str, str], dict[str, str]]:
    """(module moves, package moves) from tools/relayout-map.txt."""
    modules, packages = {}, {}
    for raw in (ROOT / "tools" / "relayout-map.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        old, new = line.split()
        is_package = (ROOT / old.replace(".", "/")).is_dir() or (ROOT / new.replace(".", "/")).is_dir()
        (packages if is_package else modules)[old] = new
    return modules, packages


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def move(old: Path, new: Path) -> None:
    new.parent.mkdir(parents=True, exist_ok=True)
    if new.exists():
        print(f"relayout: both {old} and {new} exist; merge them by hand", file=sys.stderr)
        return
    tracked = bool(git("ls-files", "--", str(old)).strip())
    if tracked:
        git("mv", str(old), str(new))
    else:
        old.rename(new)


def move_files(modules: dict[str, str], packages: dict[str, str]) -> None:
    for old, new in packages.items():
        src, dst = ROOT / old.replace(".", "/"), ROOT / new.replace(".", "/")
        if src.is_dir():
            for path in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                move(path, dst / path.relative_to(src))
    for old, new in modules.items():
        src = ROOT / (old.replace(".", "/") + ".py")
        if src.exists():
            move(src, ROOT / (new.replace(".", "/") + ".py"))
    client = ROOT / OLD_CLIENT.replace(".", "/")
    if client.is_dir():
        for path in sorted(client.glob("*.py")):
            move(path, ROOT / DEFAULT_PKG.replace(".", "/") / path.name)
        leftovers = [p for p in client.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        if not leftovers:
            subprocess.run(["rm", "-rf", str(client)], check=True)
    for package, doc in INIT_DOCS.items():
        init = ROOT / package.replace(".", "/") / "__init__.py"
        if init.parent.is_dir() and (not init.exists() or init.read_text().startswith('"""Talking to a cluster.')):
            init.write_text('"""' + textwrap.fill(doc, 116, subsequent_indent="") + '"""\n')
            git("add", str(init))


def new_module(old: str, modules: dict[str, str]) -> str:
    """kubetrain.client.X (a module) -> its new dotted name."""
    return modules.get(old) or DEFAULT_PKG + old[len(OLD_CLIENT):]


FROM_CLIENT = re.compile(r"^(?P<indent>[ \t]*)from kubetrain\.client import (?P<names>\([^)]*\)|[^\n#]*?)"
                         r"(?P<comment>[ \t]*#[^\n]*)?$", re.M)


def split_from_imports(text: str, modules: dict[str, str]) -> str:
    """`from kubetrain.client import a, b as c` -> one line per new package, names kept (aliased if renamed)."""

    def replace(match: re.Match[str]) -> str:
        indent, comment = match["indent"], match["comment"] or ""
        names = [n.strip() for n in match["names"].strip().strip("()").replace("\n", " ").split(",") if n.strip()]
        lines: dict[str, list[str]] = {}
        for entry in names:
            name, _, alias = (part.strip() for part in entry.partition(" as "))
            package, _, module = new_module(f"{OLD_CLIENT}.{name}", modules).rpartition(".")
            bound = alias or name
            lines.setdefault(package, []).append(module if bound == module else f"{module} as {bound}")
        out = [f"{indent}from {package} import {', '.join(items)}" for package, items in lines.items()]
        out[0] += comment
        return "\n".join(out)

    return FROM_CLIENT.sub(replace, text)


def short_path(dotted: str) -> str:
    return dotted.removeprefix("kubetrain.").replace(".", "/")


def rewrite(text: str, modules: dict[str, str], packages: dict[str, str]) -> str:
    text = split_from_imports(text, modules)
    text = text.replace('module = ["kubetrain.client.*"]',
                        'module = ["kubetrain.kube.*", "kubetrain.jobs.*", "kubetrain.cluster.*", '
                        '"kubetrain.controller.apicalls"]')
    for old, new in packages.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
        old_path, new_path = old.replace(".", "/"), new.replace(".", "/")
        text = re.sub(rf"\b{re.escape(old_path)}\b", new_path, text)
        old_short, new_short = short_path(old), short_path(new)
        text = re.sub(rf"(?<![\w/.-]){re.escape(old_short)}/(\w+\.(?:py|yaml))", rf"{new_short}/\1", text)
        text = re.sub(rf'/ "{re.escape(old_short)}" /', f'/ "{new_short}" /', text)
    text = re.sub(r"\bkubetrain\.client\.(\w+)", lambda m: new_module(m[0], modules), text)
    text = re.sub(r"\bkubetrain\.client\b", BARE_CLIENT, text)
    text = re.sub(r"\bkubetrain/client/(\w+)\.py\b",
                  lambda m: new_module(f"{OLD_CLIENT}.{m[1]}", modules).replace(".", "/") + ".py", text)
    text = re.sub(r"\bkubetrain/client\b", BARE_CLIENT.replace(".", "/"), text)
    return re.sub(r"(?<![\w/.-])client/(\w+)\.py\b",
                  lambda m: short_path(new_module(f"{OLD_CLIENT}.{m[1]}", modules)) + ".py", text)


def text_files() -> list[Path]:
    listed = git("ls-files", "-co", "--exclude-standard", "--", *REWRITE, *REWRITE_FILES).splitlines()
    return [ROOT / p for p in listed if p not in SKIP and (ROOT / p).is_file()]


def main() -> None:
    modules, packages = read_map()
    move_files(modules, packages)
    changed = 0
    for path in text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite(text, modules, packages)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
    print(f"relayout: rewrote {changed} files")


if __name__ == "__main__":
    main()
