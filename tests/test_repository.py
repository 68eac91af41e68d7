"""The repository's own contract: CI runs the README's test command; the wheel ships what it needs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ci_runs_the_readme_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^\$ (make \w+)\s+#", readme, flags=re.MULTILINE)
    assert commands[:2] == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert [line.strip() for line in ci.splitlines() if line.strip().startswith("make")] == ["make test"]


def test_wheel_ships_templates_images_and_types() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    force_include = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force_include == {"manifests": "kubetrain/_manifests", "images": "kubetrain/_images"}
    assert (REPO / "kubetrain" / "py.typed").is_file()
    assert config["project"]["scripts"] == {"kubetrain": "kubetrain.cli.entry:main"}
    assert "torch" not in " ".join(config["project"]["dependencies"])


def test_built_wheel_contains_templates(tmp_path: Path) -> None:
    import subprocess
    import sys
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("kubetrain-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"kubetrain/_manifests/pytorchjob.yaml.j2", "kubetrain/_manifests/trainjob.yaml.j2",
            "kubetrain/_manifests/_podtemplate.yaml.j2", "kubetrain/jobspec/starter.yaml",
            "kubetrain/py.typed"} <= names
