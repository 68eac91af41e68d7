"""`make test PYTEST_WORKERS=2` (pytest-xdist, `--dist loadscope`): each module stays on one worker, and the
real-node and kind modules form one unit on one worker, started first (tests/testenv/workers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.testenv.processes import port_range

REPO = Path(__file__).resolve().parents[2]
CONFTEST = """
import json, os
from pathlib import Path
import pytest

@pytest.fixture(scope="session")
def real_node():  # stands in for the plugin's real kubelet node
    return "node"

@pytest.fixture(scope="module")
def kind():  # stands in for tests/kind's cluster
    return "kind"

@pytest.fixture(autouse=True)
def where(request):
    line = json.dumps([request.node.nodeid.split("@")[0], os.environ.get("PYTEST_XDIST_WORKER", "main")])
    with open(os.environ["WHERE_PROBE"], "a") as probe:
        probe.write(line + "\\n")
"""
WORKERS = ("-p", "tests.testenv.workers", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadscope",
           "--no-loadscope-reorder")
PLAIN = "\n".join(f"def test_{n}():\n    pass\n" for n in range(4))


def test_modules_stay_on_one_worker_and_the_real_machine_group_is_one(pytester: pytest.Pytester, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "where.jsonl"
    monkeypatch.setenv("WHERE_PROBE", str(probe))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    pytester.makeconftest(CONFTEST)
    for name in ("test_a", "test_b", "test_c"):
        pytester.makepyfile(**{name: PLAIN})
    tests = pytester.path / "tests"  # no __init__.py: the repository's `tests` package stays importable
    (tests / "e2e").mkdir(parents=True)
    (tests / "kind").mkdir()
    (tests / "e2e" / "test_teardown.py").write_text(PLAIN)  # no real_node fixture: grouped by its directory
    (tests / "e2e" / "test_digits.py").write_text("def test_one(real_node):\n    pass\n")
    (tests / "kind" / "test_kind_e2e.py").write_text("def test_one(kind):\n    pass\n\ndef test_two(kind):\n    pass\n")

    result = pytester.runpytest_subprocess(*WORKERS)
    result.assert_outcomes(passed=4 * 4 + 1 + 2)
    ran = [json.loads(line) for line in probe.read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for nodeid, worker in ran:
        workers.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers
    real = {"tests/e2e/test_teardown.py", "tests/e2e/test_digits.py", "tests/kind/test_kind_e2e.py"}
    assert len(set().union(*(workers[m] for m in real))) == 1, workers
    # The longest group starts first: the first test its worker ran belongs to it.
    (real_worker,) = workers["tests/e2e/test_digits.py"]
    first = next(nodeid for nodeid, worker in ran if worker == real_worker)
    assert first.split("::")[0] in real


def test_a_real_node_test_outside_the_group_is_refused(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setenv("WHERE_PROBE", str(tmp_path / "where.jsonl"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_elsewhere="def test_one(real_node):\n    pass\n",
                        test_param="import pytest\n\n@pytest.mark.parametrize('kind', ['a'])\ndef test_kind(kind):\n"
                                   "    pass\n")
    result = pytester.runpytest_subprocess(*WORKERS)
    result.assert_outcomes(passed=1, errors=1)  # a parameter called `kind` is no kind cluster
    result.stdout.fnmatch_lines(["*test_elsewhere.py::test_one uses the real node outside*"])


def test_each_worker_hands_out_ports_from_its_own_share() -> None:
    """Each worker remembers only its own ports: two workers get disjoint parts of the range below the
    kernel's ephemeral ports, so they never hand one port to two components."""
    whole = port_range({})
    shares = [port_range({"PYTEST_XDIST_WORKER": f"gw{n}", "PYTEST_XDIST_WORKER_COUNT": "2"}) for n in (0, 1)]
    assert shares[0][0] == whole[0] and shares[0][1] + 1 == shares[1][0] and shares[1][1] <= whole[1]
    assert shares[0][1] - shares[0][0] == shares[1][1] - shares[1][0] > 1000
    assert port_range({"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "1"}) == whole


KEPT_CONFTEST = CONFTEST + """
from tests.testenv.plugin import _kept

pytest_plugins = ["tests.testenv.plugin"]  # its hooks; the fixture below stands in for its `trainer`

def said(event):
    with open(os.environ["WHERE_PROBE"], "a") as probe:
        probe.write(json.dumps([event, os.environ.get("PYTEST_XDIST_WORKER", "main")]) + "\\n")

class Part:
    def start(self):
        said("start")

    def stop(self):
        said("stop")

@pytest.fixture(scope="module")
def trainer(request):  # stands in for the plugin's Trainer stack, kept the same way
    yield from _kept(request, "trainer", Part)
"""


def test_the_trainer_modules_run_together_on_one_stack(pytester: pytest.Pytester, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The modules that use the Trainer stack are one unit: one start and one stop for all of them, stopped
    before any other module runs on that worker."""
    probe = tmp_path / "where.jsonl"
    monkeypatch.setenv("WHERE_PROBE", str(probe))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))))
    pytester.makeconftest(KEPT_CONFTEST)
    uses = "\n".join(f"def test_{n}(trainer):\n    pass\n" for n in range(2))
    for module in ("tests/jobs/test_trainjob.py", "tests/queues/test_kueue.py", "tests/validate/test_oracle.py"):
        (pytester.path / module).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / module).write_text(uses)
    # a module whose first test does not use it: the stack runs on through that test
    (pytester.path / "tests/validate/test_oracle.py").write_text("def test_first():\n    pass\n" + uses)
    for name in ("test_a", "test_b", "test_c", "test_d"):
        pytester.makepyfile(**{name: PLAIN})
    pytester.makepyfile(test_elsewhere="def test_one(trainer):\n    pass\n")

    result = pytester.runpytest_subprocess(*WORKERS)
    result.assert_outcomes(passed=3 * 2 + 1 + 4 * 4, errors=1)
    result.stdout.fnmatch_lines(["*test_elsewhere.py::test_one uses the trainer fixture outside TRAINER_MODULES*"])
    ran = [json.loads(line) for line in probe.read_text().splitlines()]
    (worker,) = {w for nodeid, w in ran if nodeid.startswith("tests/")}
    on_it = [nodeid for nodeid, w in ran if w == worker]
    assert on_it.count("start") == on_it.count("stop") == 1, on_it
    between = on_it[on_it.index("start") + 1:on_it.index("stop")]
    assert len(between) == 7 and all(nodeid.startswith("tests/") for nodeid in between), on_it
