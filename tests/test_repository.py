"""The repository's own contract: CI runs the README's test command; the wheel ships what it needs."""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
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


def _ci_run(tmp_path: Path, status: int, seconds: float = 0, **env: str) -> subprocess.CompletedProcess[str]:
    """.ci/run in a copy of the repository whose `make` is a stand-in exiting with `status`."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"make $*\"\nsleep {seconds}\nexit {status}\n")
    fake.chmod(0o755)
    return subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
                                            **env})


def test_ci_reports_its_time_against_the_warm_budget_and_keeps_makes_status(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    result = _ci_run(tmp_path, 3, KUBETRAIN_TESTENV_CACHE=str(tmp_path / "cache"))
    assert result.returncode == 3
    assert result.stdout.splitlines()[0] == "make test"
    assert re.fullmatch(r"budget: warm run of make test \(exit 3\) took 0 min \d+ s against 20 min: within budget",
                        result.stdout.splitlines()[-1]), result.stdout
    assert re.fullmatch(r"machine: the CPU probe took \d+\.\d\d s before and \d+\.\d\d s after .*",
                        result.stdout.splitlines()[-2]), result.stdout


def test_ci_over_budget_is_a_line_not_a_failure(tmp_path: Path) -> None:
    result = _ci_run(tmp_path, 0, 1.2, KUBETRAIN_TESTENV_CACHE=str(tmp_path / "no-cache-yet"),
                     KUBETRAIN_CI_BUDGET_S="0")
    assert result.returncode == 0
    assert re.fullmatch(r"budget: cold run of make test \(exit 0\) took 0 min [1-9]\d* s against 0 min: "
                        r"OVER budget by 0 min [1-9]\d* s", result.stdout.splitlines()[-1]), result.stdout


# Test folders that are tiers or the test environment rather than mirrors of one kubetrain package.
TEST_TIERS = {"harness": "checks the test harness itself", "e2e": "whole jobs on the real node",
              "testenv": "the shared fixtures and binaries", "docs": "the documents against the code"}


def test_tests_mirror_the_package_layout() -> None:
    packages = {p.name for p in (REPO / "kubetrain").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    strays = sorted(folders - packages - set(TEST_TIERS))
    assert not strays, f"tests/{strays[0]} names no kubetrain package: move its files to tests/<package>/"



def test_lazy_package_faces_are_typed_for_mypy() -> None:
    """A package that loads its names on first use (a module `__getattr__`) hides that function from type
    checkers: mypy would type every unknown name as Any, and a missing verb (`jobs.no_such_verb()`) would
    pass `make lint` and fail at run time. The names are the `if TYPE_CHECKING:` imports."""
    visible = [f"{path.relative_to(REPO)}:{node.lineno}" for path in sorted((REPO / "kubetrain").rglob("*.py"))
               for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
    assert not visible, f"{visible[0]}: a module __getattr__ outside `if not TYPE_CHECKING:` (mypy sees Any)"

# ---- what tracked files may say: nothing of this machine, nothing of how the work was organised ------------
# A path that starts at one of these roots is this machine's (the repository is cloned anywhere).
SCRATCH_ROOTS = ("work", "root", "tmp")
MACHINE_PATH = re.compile(r"(?<![\w$}/.-])/(" + "|".join(SCRATCH_ROOTS) + r")/[\w.-]*")
# Paths under /tmp and /root that are not this machine's scratch: where kubetrain or a tool it drives puts
# things, inside a pod, a container or a kind node.
NOT_SCRATCH = (
    "/tmp/kubetrain-progress",  # the pods' progress directory (kubetrain.podenv)
    "/tmp/kubetrain-gpu-check-",  # `make gpu-check`'s own working directory, as its recorded results show
    "/tmp/k8s-webhook-server",  # the training-operator's hard-coded webhook certificate directory
    "/tmp/torch-packages.txt",  # inside the test image's build (tests/testenv/base/Containerfile)
    "/root/gpu-params",  # inside a kind node (kubetrain/kind/steps.py)
)
# Internal work units: numbered issues, stops and turns of the work, and its landings.
WORK_UNIT = re.compile(r"\b(issue|stop|turn)s? #?\d+|\blanding\b|(?<![\w/&])#\d+\b", re.IGNORECASE)
# `#N` that are not work units: upstream issues after their repository (`kubeflow/trainer#1992, #3974`),
# numbered things of other tools (a collective's sequence number, Kueue's queue position, BuildKit's steps),
# CSS colours.
UPSTREAM_LIST = re.compile(r"[\w.-]+/[\w.-]+#\d+(, #\d+)+|Trainer #\d+|[\w:]+_\w+ #\d+|pending #\d+|^\s*(\| )?#\d+ "
                           r"|\| #\d+ \d|\"#\d+ \[|color: #\w+")
BINARY_OR_VENDORED = (".png", ".min.js", ".lock")


@functools.cache
def _tracked_lines() -> list[tuple[str, int, str]]:
    """(file, line number, line) of every tracked text file."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    lines = []
    for name in names.splitlines():
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary, or deleted in the work tree
        if not name.endswith(BINARY_OR_VENDORED):
            lines += [(name, number, line) for number, line in enumerate(text.splitlines(), 1)]
    return lines


def _findings(pattern: re.Pattern[str], allowed: re.Pattern[str] | None = None,
              allowed_text: tuple[str, ...] = ()) -> list[str]:
    found = []
    for name, number, line in _tracked_lines():
        if not pattern.search(line):
            continue
        text = allowed.sub("", line) if allowed else line
        hits = [m.group(0) for m in pattern.finditer(text) if not text[m.start():].startswith(allowed_text)]
        found += [f"{name}:{number}: {hit}" for hit in hits]
    return found


def test_no_tracked_file_names_a_path_of_this_machine() -> None:
    found = _findings(MACHINE_PATH, allowed_text=NOT_SCRATCH)
    assert not found, "machine paths (write them relative, or as a placeholder like BASE):\n" + "\n".join(found)


def test_no_tracked_file_refers_to_internal_work_units() -> None:
    found = _findings(WORK_UNIT, UPSTREAM_LIST)
    assert not found, "say what the system does now; history goes to CHANGELOG.md:\n" + "\n".join(found)
