"""The layers of docs/architecture.md hold: `lint-imports` checks .importlinter's contracts (it replaced the
hand-written AST check that only `kubernetes` stays under the client). A planted wrong import is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports on the `kubetrain` package under `root` (it puts the working directory first on sys.path)."""
    return subprocess.run([LINT_IMPORTS, "--no-cache", "--no-logo", str(REPO / ".importlinter")], cwd=root,
                          capture_output=True, text=True, check=False, timeout=120)


def test_every_contract_is_kept() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_wrong_import_breaks_its_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "kubetrain", tmp_path / "kubetrain", ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "kubetrain" / "render" / "planted.py"
    planted.write_text("def f():\n    from kubernetes import client\n    from kubetrain.cli import main\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1
    assert "kubetrain.render.planted -> kubernetes" in done.stdout
    assert "kubetrain.render.planted -> kubetrain.cli" in done.stdout
