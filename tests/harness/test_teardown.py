"""Teardown leaves no process behind: not after a failing test, not after
SIGINT (Ctrl-C) of the pytest that owns the control plane, not even after
SIGKILL of it (children die with it through PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testenv import binaries
from tests.testenv.plugin import unavailable
from tests.testenv.polling import TimedOut, wait_for

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]
INNER = """
import json, os, signal, time

# A job started in the background of a non-interactive shell (`cmd &`, as some CI runners start theirs)
# inherits SIGINT ignored (POSIX), and a Python started so never raises KeyboardInterrupt: the Ctrl-C the
# outer test sends would do nothing, and this pytest would sleep its 600 s.
signal.signal(signal.SIGINT, signal.default_int_handler)

def test_hold(controlplane):
    info = {"pids": controlplane.pids(), "workdir": str(controlplane.workdir)}
    probe = os.environ["KUBETRAIN_TEARDOWN_PROBE"]
    with open(probe + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(probe + ".tmp", probe)
    if os.environ["KUBETRAIN_TEARDOWN_MODE"] == "fail":
        raise AssertionError("deliberate failure")
    time.sleep(600)
"""


@pytest.fixture(scope="module")
def have_binaries() -> None:
    try:
        binaries.resolve()
    except binaries.MissingBinaries as exc:
        unavailable(str(exc))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"  # a zombie is dead, merely not yet reaped by init


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if text in proc.joinpath("cmdline").read_bytes().decode(errors="replace") and _alive(int(proc.name)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def _run_inner(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], dict]:
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    probe = tmp_path / "probe.json"
    env = {
        **os.environ,
        "KUBETRAIN_TEARDOWN_PROBE": str(probe),
        "KUBETRAIN_TEARDOWN_MODE": mode,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "tests.testenv.plugin",
        "-p",
        "no:cacheprovider",
        "-q",
        "-c",
        str(tmp_path / "pytest.ini"),
        "--rootdir",
        str(tmp_path),
        str(tmp_path / "test_inner.py"),
    ]
    log = (tmp_path / "inner.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    def inner_running() -> None:
        if proc.poll() is not None:
            raise TimedOut(f"inner pytest exited with {proc.returncode}")

    try:
        wait_for(probe.exists, "the inner pytest to start a control plane", 180, guard=inner_running)
    except TimedOut as exc:
        proc.kill()
        pytest.fail(f"{exc}:\n{(tmp_path / 'inner.log').read_text()}")
    return proc, json.loads(probe.read_text())


@pytest.mark.parametrize("mode", ["fail", "SIGINT", "SIGKILL"])
def test_no_process_left_behind(tmp_path, have_binaries, mode):
    proc, info = _run_inner(tmp_path, mode)
    assert info["pids"] and all(_alive(p) for p in info["pids"])
    if mode != "fail":
        proc.send_signal(getattr(signal, mode))
    proc.wait(timeout=90)

    with contextlib.suppress(TimedOut):  # the assertion below names what is left
        wait_for(lambda: not any(_alive(p) for p in info["pids"]), "the inner control plane to exit", 20)
    assert [p for p in info["pids"] if _alive(p)] == [], (tmp_path / "inner.log").read_text()
    assert _processes_mentioning(info["workdir"]) == []
    if mode == "SIGKILL":
        # Nothing ran in the owner to remove its temp dir; the next
        # ControlPlane start removes such orphans. Clean up here too.
        shutil.rmtree(info["workdir"], ignore_errors=True)
    else:
        assert not Path(info["workdir"]).exists()
