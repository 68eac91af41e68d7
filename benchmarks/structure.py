"""The shape of the tree, measured: modules per package, function lengths, function-local imports, import
circles, the layers contract's known debt, and what the pod's launcher loads. docs/architecture.md quotes it.

    python benchmarks/structure.py            # the numbers, as Markdown
    python benchmarks/structure.py --locals   # also every function-local import, file:line
"""

from __future__ import annotations

import argparse
import ast
import configparser
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "kubetrain"
LAUNCHER = "kubetrain.runtime.launch"
HEAVY = ("jinja2", "pydantic", "yaml", "kubetrain.jobspec", "kubetrain.render", "kubetrain.kube")


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else "(top level)"


def function_lengths(tree: ast.AST) -> list[int]:
    return [node.end_lineno - node.lineno + 1 for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno]


def local_imports(tree: ast.Module) -> list[int]:
    """Lines of imports inside a function (imports under `if TYPE_CHECKING:` are not run, so not counted)."""
    lines = []
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            lines += [node.lineno for node in ast.walk(function) if isinstance(node, ast.Import | ast.ImportFrom)]
    return sorted(set(lines))


def circles() -> list[list[str]]:
    """Strongly connected sets of kubetrain modules (every import counts, function-local ones too)."""
    graph = grimp.build_graph("kubetrain", exclude_type_checking_imports=True)
    modules = sorted(graph.modules)
    edges = {module: graph.find_modules_directly_imported_by(module) for module in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for module in modules:
        if module not in index:
            visit(module)
    return found


def layer_debt() -> int:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    ignored = config.get("importlinter:contract:layers", "ignore_imports", fallback="")
    return len([line for line in ignored.splitlines() if line.strip()])


def launcher_cost() -> tuple[int, int, list[str], int]:
    """(kubetrain modules, all modules, heavy packages loaded, -X importtime total in ms) of the launcher."""
    probe = ("import sys, " + LAUNCHER + "; mods = sorted(sys.modules); "
             "print(sum(m.startswith('kubetrain') for m in mods), len(mods)); "
             f"print(' '.join(h for h in {HEAVY!r} if h in mods))")
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True,
                          check=True, cwd=REPO)
    counts, heavy = done.stdout.splitlines()[:2]
    own, total = (int(word) for word in counts.split())
    micros = sum(int(line.split("|")[0].split(":")[1]) for line in done.stderr.splitlines()
                 if line.startswith("import time:") and line.split("|")[0].split(":")[1].strip().isdigit())
    return own, total, heavy.split(), micros // 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locals", action="store_true", help="list every function-local import")
    args = parser.parse_args()
    per_package: Counter[str] = Counter()
    lengths: list[int] = []
    imports: dict[Path, list[int]] = {}
    for path in sources():
        tree = ast.parse(path.read_text(), str(path))
        per_package[package_of(path)] += 1
        lengths += function_lengths(tree)
        if found := local_imports(tree):
            imports[path] = found
    deciles = statistics.quantiles(lengths, n=10)
    print(f"modules: {sum(per_package.values())}; per package: "
          + ", ".join(f"{name} {count}" for name, count in sorted(per_package.items())))
    print(f"functions: {len(lengths)}; length median {statistics.median(lengths):g} lines, p90 {deciles[8]:g}")
    print(f"function-local imports: {sum(map(len, imports.values()))} in {len(imports)} files")
    found = circles()
    print(f"import circles: {len(found)}" + "".join(f"\n  {' <-> '.join(group)}" for group in found))
    print(f"layers contract ignore_imports (arrows back up): {layer_debt()}")
    own, total, heavy, millis = launcher_cost()
    print(f"`import {LAUNCHER}`: {own} kubetrain modules, {total} modules in all, -X importtime total "
          f"{millis} ms; loads: {', '.join(heavy) or 'none of ' + ', '.join(HEAVY)}")
    if args.locals:
        for path, lines in imports.items():
            for line in lines:
                print(f"  {path.relative_to(REPO)}:{line}")


if __name__ == "__main__":
    main()
