"""The stress mode (tests/testenv/stress.py): `--cpu-burners N` keeps N busy loops running while the tests
run, and none outlives the session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.testenv.polling import wait_for
from tests.testenv.stress import MARK

REPO = Path(__file__).resolve().parents[2]
INNER = f"""
import json, os
from pathlib import Path

def burners():
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\\0")
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if {MARK!r}.encode() in argv and ppid == os.getpid():
            found.append(int(proc.name))
    return found

def test_burners_run_beside_the_tests():
    pids = burners()
    Path(os.environ["BURNERS_PROBE"]).write_text(json.dumps(pids))
    assert len(pids) == 2
"""


def _alive(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return MARK.encode() in argv


def test_cpu_burners_run_during_the_session_and_stop_with_it(pytester: pytest.Pytester, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "burners.json"
    monkeypatch.setenv("BURNERS_PROBE", str(probe))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "tests.testenv.stress", "--cpu-burners", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["stress: 2 CPU burner(s) ran beside the tests (--cpu-burners), "
                                 "* CPU-s of theirs in this run's CPU above"])
    pids = json.loads(probe.read_text())
    assert len(pids) == 2
    wait_for(lambda: not any(_alive(pid) for pid in pids), "the CPU burners to be gone", 30, 0.1)
