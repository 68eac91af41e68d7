"""The layers of docs/architecture.md hold: `lint-imports` checks .importlinter's contracts (it replaced the
hand-written AST check that only `kubernetes` stays under the client). A planted wrong import is caught."""

from __future__ import annotations

import configparser
import re
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
    (tmp_path / "kubetrain" / "rules" / "planted.py").write_text("from kubetrain.jobspec.model import JobSpec\n")
    (tmp_path / "kubetrain" / "runtime" / "planted.py").write_text("import jinja2\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1
    assert "kubetrain.render.planted -> kubernetes" in done.stdout
    assert "kubetrain.render.planted -> kubetrain.cli" in done.stdout
    assert "kubetrain.rules.planted -> kubetrain.jobspec.model" in done.stdout  # an arrow back up
    assert "kubetrain.runtime.planted -> jinja2" in done.stdout  # not what a pod needs


def test_the_layers_carry_no_known_debt() -> None:
    """No import runs back up a layer, not even a listed exception."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    assert config.get("importlinter:contract:layers", "ignore_imports", fallback="") == ""


def test_the_architecture_doc_lists_the_layers_in_their_order() -> None:
    """docs/architecture.md's table names the layers top to bottom as .importlinter orders them."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    layers = [name.strip() for line in config.get("importlinter:contract:layers", "layers").splitlines()
              for name in line.split("|") if name.strip()]
    doc = (REPO / "docs" / "architecture.md").read_text()
    table = [line for line in doc.splitlines() if line.startswith("| ") and "`kubetrain." in line]
    named = [found for line in table for found in re.findall(r"`(kubetrain\.[a-z_.]+)`", line.split("|")[2])]
    assert [name for name in named if name in layers] == layers
