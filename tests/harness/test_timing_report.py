"""The timing report (tests/testenv/timing.py): every run says where its time went, per module and per fixture,
with the shared fixtures, the critical path and CPU busy against waiting; under pytest-xdist too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFTEST = """
import time
import pytest

@pytest.fixture(scope="session")
def shared():
    time.sleep(0.3)
    yield "shared"
    time.sleep(0.2)

@pytest.fixture(scope="module")
def per_module():
    time.sleep(0.1)
    yield
"""
MODULE = """
import time

def test_one(shared, per_module):
    time.sleep(0.1)

def test_two(shared):
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_alpha=MODULE, test_beta=MODULE)
    report = tmp_path / "timing" / "report.json"
    monkeypatch.setenv("KUBETRAIN_TIMING_REPORT", str(report))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return report


def _fixture(report: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [f for f in report["fixtures"] if f["name"] == name]


def test_a_run_reports_modules_shared_fixtures_critical_path_and_cpu(pytester: pytest.Pytester, suite: Path
                                                                       ) -> None:
    result = pytester.runpytest_subprocess("-p", "tests.testenv.timing", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    report = json.loads(suite.read_text())

    modules = {m["module"]: m for m in report["modules"]}
    assert set(modules) == {"test_alpha.py", "test_beta.py"}
    assert all(m["tests"] == 2 for m in modules.values())
    # The module that set the session fixture up pays for it; the fixture's teardown lands in the last module.
    (shared,) = _fixture(report, "shared")
    assert shared["scope"] == "session"
    assert shared["setup_s"] >= 0.3 and shared["teardown_s"] >= 0.2
    assert shared["used_by"] == ["test_alpha.py", "test_beta.py"]
    assert modules[shared["paid_by"]]["setup_s"] >= 0.3 + 0.1
    # fixtures are listed by cost: the two per_module set-ups (0.1 s each) come in either order
    assert sorted(f["paid_by"] for f in _fixture(report, "per_module")) == ["test_alpha.py", "test_beta.py"]
    assert report["function_fixtures"] == {} or "shared" not in report["function_fixtures"]

    critical = report["critical_path"]
    assert critical["worker"] == "main"
    assert [m["module"] for m in critical["modules"]] == ["test_alpha.py", "test_beta.py"]
    assert report["wall_s"] >= 0.3 + 0.2 + 2 * 0.1 + 2 * 0.1
    assert report["cpu"]["self_s"] > 0
    assert report["machine"]["cpus"] >= 1 and 0 <= report["machine"]["busy_fraction"] <= 1

    text = suite.with_suffix(".txt").read_text()
    assert "critical path in run order:" in text and "shared (session, 2 modules" in text
    result.stdout.fnmatch_lines(["*where the time went*", "wall * s, 1 process(es)*", "critical path: main*",
                                 "*shared (session, 2 modules, paid by test_alpha.py)*", f"full report: {suite}"])


def test_two_xdist_workers_are_merged_into_one_report(pytester: pytest.Pytester, suite: Path) -> None:
    result = pytester.runpytest_subprocess("-p", "tests.testenv.timing", "-p", "no:cacheprovider", "-n", "2",
                                           "--dist", "loadscope")
    result.assert_outcomes(passed=4)
    report = json.loads(suite.read_text())

    assert report["workers"] == 2
    assert {m["module"] for m in report["modules"]} == {"test_alpha.py", "test_beta.py"}
    # Each worker sets the session fixture up for itself: two set-ups, each used by its worker's module.
    shared = _fixture(report, "shared")
    assert sorted(f["worker"] for f in shared) == ["gw0", "gw1"]
    assert sorted(m for f in shared for m in f["used_by"]) == ["test_alpha.py", "test_beta.py"]
    assert report["critical_path"]["worker"] in {"gw0", "gw1"}
    result.stdout.fnmatch_lines(["*where the time went*", "wall * s, 2 process(es)*"])


def test_a_crashed_worker_is_reported_not_an_internal_error(pytester: pytest.Pytester, suite: Path) -> None:
    # pytest-xdist reports the test a worker died in with the phase "???" (xdist's dsession.handle_crashitem).
    pytester.makepyfile(test_gamma="import os\n\ndef test_dies():\n    os._exit(1)\n")
    result = pytester.runpytest_subprocess("-p", "tests.testenv.timing", "-p", "no:cacheprovider", "-n", "2",
                                           "--dist", "loadscope", "--max-worker-restart=0", timeout=120)
    result.assert_outcomes(passed=4, failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    assert json.loads(suite.read_text())["workers"] >= 1
