"""pytest plugin: `--cpu-burners N` runs N busy loops beside the tests for the whole session.

`make test-stress` uses it to run the timing-sensitive modules on a machine whose CPUs are all taken, as CI's
busiest days are: a test that waits on a condition with a deadline still passes (only later), a test that
sleeps a guess of how long the cluster needs fails. The burners run at normal priority, each its own process
group with a parent-death signal (tests/testenv/processes.py), so nothing outlives the session; under
pytest-xdist only the controller starts them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from .processes import Supervisor

OPTION = "--cpu-burners"
MARK = "kubetrain-cpu-burner"  # in each burner's argv, so `ps` shows what it is
BURN = "while True: pass"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(OPTION, type=int, default=0, metavar="N",
                     help="run N busy-loop processes beside the tests (make test-stress; docs/testenv.md)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process, from /proc (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Burners:
    def __init__(self, count: int) -> None:
        self.count = count
        self.cpu_s = 0.0
        self.supervisor = Supervisor(Path(tempfile.mkdtemp(prefix="kubetrain-burners-")))

    def pytest_sessionstart(self) -> None:
        for n in range(self.count):
            self.supervisor.start(f"burner-{n}", [sys.executable, "-c", BURN, MARK])

    def pytest_sessionfinish(self) -> None:
        self.cpu_s = sum(cpu_seconds(pid) for pid in self.supervisor.pids())
        self.supervisor.stop(timeout=5)
        shutil.rmtree(self.supervisor.log_dir, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(f"stress: {self.count} CPU burner(s) ran beside the tests ({OPTION}), "
                                    f"{self.cpu_s:.0f} CPU-s of theirs in this run's CPU above")


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption(OPTION)
    if count > 0 and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Burners(count), "kubetrain-cpu-burners")
