"""`kubernetes` is imported only under kubetrain/kube (issue 15): the controller, the CLI and the rest reach
the API through kubetrain.kube. An AST check of every import statement, including function-local ones."""

from __future__ import annotations

import ast
from pathlib import Path

import kubetrain

PACKAGE = Path(kubetrain.__file__).resolve().parent
CLIENT = PACKAGE / "client"


def kubernetes_imports(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """`file:line: statement` of each import of the kubernetes package (or a submodule) in `path`."""
    found = []
    nodes = sorted(ast.walk(ast.parse(path.read_text(), str(path))), key=lambda n: getattr(n, "lineno", 0))
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name == "kubernetes" or name.startswith("kubernetes.") for name in names):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_an_import(tmp_path: Path) -> None:
    sample = PACKAGE / "controller" / "loop.py"
    assert kubernetes_imports(sample) == []
    planted = tmp_path / "kubetrain" / "x.py"
    planted.parent.mkdir()
    planted.write_text("def f():\n    from kubernetes.dynamic import DynamicClient\nimport os, kubernetes\n")
    assert [line.split(": ", 1)[0] for line in kubernetes_imports(planted, tmp_path)] == ["kubetrain/x.py:2",
                                                                                         "kubetrain/x.py:3"]


def test_kubernetes_is_imported_only_under_kubetrain_client() -> None:
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if CLIENT not in p.parents]
    assert len(outside) > 50  # the whole package was walked
    offenders = [line for path in outside for line in kubernetes_imports(path)]
    assert offenders == [], "import kubernetes only under kubetrain/kube:\n" + "\n".join(offenders)
