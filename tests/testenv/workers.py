"""pytest plugin: two pytest-xdist workers without two real nodes (`make test PYTEST_WORKERS=2`).

With `-n N --dist loadscope` each test module is one unit of work on one worker (its module fixtures are set up
once), as pytest-xdist's loadscope does, except that the real-node modules (tests/e2e) and the kind cluster module
form a single unit: they share this machine's containerd root, podman storage, bridges and network namespaces,
and their session's real node is set up once. That unit, the longest, is handed out first (pass
`--no-loadscope-reorder`, as the Makefile does, or xdist orders units by their number of tests). The other modules
that use the Trainer stack form a unit too, so that it is started once for all of them. Every worker
starts its own control plane (free ports, its own temp dir), which the control-plane tests share within the worker.

(pytest-xdist's own `xdist_group` marks do nothing with pytest 9.2: xdist 3.8 renames `item._nodeid`, which
pytest no longer reads.)
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

SERIAL_GROUP = "real-node-and-kind"
SERIAL_PATHS = ("tests/e2e/", "tests/kind/test_kind_e2e.py")
SERIAL_FIXTURE = "real_node"  # the session's real node (a parameter may be called `kind`: not a fixture to go by)
# The modules that use the `trainer` fixture (outside the group above): one unit, so that one Trainer + JobSet
# serves them all (tests/testenv/plugin.py keeps it from one module to the next). Installing and removing the
# stack takes about 10 s and 7 CPU-seconds of the API server's each time (it rebuilds its OpenAPI).
TRAINER_GROUP = "trainer-stack"
TRAINER_MODULES = ("tests/controller/test_operator_trainjob.py", "tests/harness/test_trainjob.py",
                   "tests/jobs/test_trainjob.py", "tests/jobs/test_trainjobset.py", "tests/queues/test_kueue.py",
                   "tests/validate/test_differential.py", "tests/validate/test_oracle.py",
                   "tests/validate/test_parity.py")
TRAINER_FIXTURE = "trainer"
GROUPED = "kubetrain_grouped"
MISPLACED = pytest.StashKey[str]()


def serial(nodeid: str) -> bool:
    return nodeid.startswith(SERIAL_PATHS)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class GroupScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        if serial(nodeid):
            return SERIAL_GROUP
        return TRAINER_GROUP if module_of(nodeid) in TRAINER_MODULES else module_of(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    return GroupScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[GROUPED] = node.config.getvalue("dist") == "loadscope"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config, "workerinput", {}).get(GROUPED):
        return
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if SERIAL_FIXTURE in fixtures and not serial(item.nodeid):
            item.stash[MISPLACED] = (f"{item.nodeid} uses the real node outside {' and '.join(SERIAL_PATHS)}: "
                                     "another worker would run it beside them (tests/testenv/workers.py)")
        elif TRAINER_FIXTURE in fixtures and not serial(item.nodeid) and module_of(item.nodeid) not in TRAINER_MODULES:
            item.stash[MISPLACED] = (f"{item.nodeid} uses the {TRAINER_FIXTURE} fixture outside "
                                     "TRAINER_MODULES: add its module there (tests/testenv/workers.py)")
    items.sort(key=lambda item: not serial(item.nodeid))  # stable; every worker collects the same order


def pytest_runtest_setup(item: pytest.Item) -> None:
    if reason := item.stash.get(MISPLACED, ""):
        pytest.fail(reason, pytrace=False)
