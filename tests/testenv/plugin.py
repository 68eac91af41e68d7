"""pytest plugin: the `controlplane` marker and fixtures.

Enable with ``pytest_plugins = ["tests.testenv.plugin"]`` in tests/conftest.py.

* ``controlplane`` (session): a started ControlPlane (kubeconfig, api_client(),
  set_pod_phase(), set_pod_logs(), ...). Tests using it are marked
  ``controlplane`` automatically.
* ``namespace`` (function): a fresh namespace per test, deleted afterwards.
* ``k8s`` (function): an admin ApiClient.
* ``trainer`` (module): Kubeflow Trainer v2 + JobSet added for the modules that use it, kept from one such
  module to the next on the same worker (tests/testenv/workers.py runs them one after another).
* ``kueue`` (module): Kueue (with Trainer v2 + JobSet, for its TrainJob integration), flavors and
  ClusterQueues; see kueue.py.
* ``real_node`` (session): a real kubelet node (containerd, runc, CNI, CoreDNS)
  joined to the control plane; see node.py. Tests using it are marked ``e2e``.
* ``s3_server`` (session): a real S3-compatible server (moto's, own process); see s3.py.
* ``mlflow_server`` (session): a real MLflow tracking server (SQLite backend, own process); see
  mlflowserver.py.

Missing binaries: with CI=true the fixture fails (a CI run must never silently
skip the integration tests); locally it skips and says to run `make testenv`.
Set KUBETRAIN_TESTENV_KEEP=1 to keep the temp dir (logs, kubeconfig) for debugging.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from .binaries import PREPARE_HINT, MissingBinaries
from .controlplane import ControlPlane
from .kueue import Kueue
from .mlflowserver import MLflowServer, MLflowUnavailable
from .node import RealNode
from .polling import wait_for
from .s3 import S3Server, S3Unavailable
from .trainer import TrainerStack

MARKER = "controlplane"
FIXTURES = {"controlplane", "namespace", "k8s", "trainer", "real_node", "kueue"}
E2E_MARKER = "e2e"
NEXT_ITEM = pytest.StashKey["pytest.Item | None"]()
MODULE_FIXTURES = pytest.StashKey[frozenset[str]]()  # the fixtures that any test of the item's module uses
_KEPT: dict[str, Any] = {}  # this process's parts that outlive one module (_kept)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: needs the real Kubernetes control plane from `make testenv` (tests/testenv)"
    )
    config.addinivalue_line("markers", f"{E2E_MARKER}: runs real containers on the test control plane's real node")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    modules = [item.nodeid.split("::", 1)[0] for item in items]
    in_module: dict[str, set[str]] = {}
    for module, item in zip(modules, items, strict=True):
        in_module.setdefault(module, set()).update(getattr(item, "fixturenames", ()))
    frozen = {module: frozenset(names) for module, names in in_module.items()}
    for module, item in zip(modules, items, strict=True):
        item.stash[MODULE_FIXTURES] = frozen[module]
        names = set(getattr(item, "fixturenames", ()))
        if FIXTURES & names:
            item.add_marker(MARKER)
        if "real_node" in names:
            item.add_marker(E2E_MARKER)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable(reason: str) -> None:
    """Fail under CI, skip locally."""
    if in_ci():
        pytest.fail(f"CI=true and the test control plane is unavailable: {reason}", pytrace=False)
    pytest.skip(f"{reason}" if PREPARE_HINT in reason else f"{reason}; {PREPARE_HINT}")


@pytest.fixture(scope="session")
def controlplane() -> Iterator[ControlPlane]:
    try:
        cp = ControlPlane(keep_workdir=bool(os.environ.get("KUBETRAIN_TESTENV_KEEP")))
    except MissingBinaries as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable() always raises
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


def _started(make: Callable[[], Any]) -> Any:
    """make() (skipped locally / failed under CI when its binaries are missing), started."""
    try:
        part = make()
    except MissingBinaries as exc:
        unavailable(str(exc))
        raise
    part.start()
    return part


def _running(make: Callable[[], Any]) -> Iterator[Any]:
    """make(), started, then stopped."""
    part = _started(make)
    try:
        yield part
    finally:
        part.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    item.session.stash[NEXT_ITEM] = nextitem  # before the default teardown finalizes the module's fixtures


def _kept(request: pytest.FixtureRequest, name: str, make: Callable[[], Any]) -> Iterator[Any]:
    """A module fixture's part, started once for consecutive modules that use fixture `name`: it is stopped
    when the module's last test is torn down and the next test on this process is in a module that does not
    use it (or there is none). tests/testenv/workers.py runs such modules one after another on one worker."""
    if name not in _KEPT:
        _KEPT[name] = _started(make)
    yield _KEPT[name]
    following = request.session.stash.get(NEXT_ITEM, None)
    if following is None or name not in following.stash.get(MODULE_FIXTURES, frozenset()):
        _KEPT.pop(name).stop()


@pytest.fixture(scope="session")
def real_node(controlplane: ControlPlane) -> Iterator[RealNode]:
    """The real kubelet node, for the whole session (started on first use, stopped before the control plane)."""
    yield from _running(lambda: RealNode(controlplane))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    yield from _served(S3Server(tmp_path_factory.mktemp("s3")), S3Unavailable, "the S3 test server")


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MLflowServer]:
    # on every address: the real node's pods reach it on their bridge's gateway (tests/e2e/test_recovery.py)
    server = MLflowServer(tmp_path_factory.mktemp("mlflow"), bind="0.0.0.0")
    yield from _served(server, MLflowUnavailable, "the MLflow test server")


def _served(server: Any, unavailable: type[Exception], what: str) -> Iterator[Any]:
    """A test server for the session: started, yielded, stopped; unavailable fails under CI, else skips."""
    try:
        server.start()
    except unavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true and {what} is unavailable: {exc}", pytrace=False)
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def trainer(controlplane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[TrainerStack]:
    """Kubeflow Trainer v2 + JobSet on the session's control plane, for the test modules that use it: its CRDs,
    webhooks and controllers are removed again after the last of consecutive such modules."""
    yield from _kept(request, "trainer", lambda: TrainerStack(controlplane))


@pytest.fixture(scope="module")
def kueue(controlplane: ControlPlane, trainer: TrainerStack) -> Iterator[Kueue]:
    """Kueue on the session's control plane for one test module, after Trainer v2 + JobSet (its TrainJob
    and JobSet integrations need their CRDs at start); removed again afterwards."""
    yield from _running(lambda: Kueue(controlplane))


@pytest.fixture
def k8s(controlplane: ControlPlane) -> kubernetes.client.ApiClient:
    return controlplane.api_client()


@pytest.fixture
def namespace(controlplane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{slug}-{uuid.uuid4().hex[:5]}"
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    core.create_namespace({"metadata": {"name": name, "labels": {"kubetrain.test/namespace": "true"}}})
    _wait_default_service_account(core, name)
    yield name
    # Pods first and directly (the namespace controller takes ~5 s to get to
    # them), then wait for them only: the next test may need their GPUs.
    # kwok removes a deleted pod at once; the namespace terminates later.
    kubernetes.client.CustomObjectsApi(core.api_client).delete_collection_namespaced_custom_object(
        "kubeflow.org", "v1", name, "pytorchjobs"
    )  # or the operator re-creates the pods
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)  # real-node pods: no 30 s grace
    core.delete_namespace(name, propagation_policy="Background")
    wait_for(lambda: not core.list_namespaced_pod(name).items, f"pods of namespace {name} to be deleted", 60, 0.1)


def _wait_default_service_account(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    # The ServiceAccount admission plugin rejects pods until the controller
    # manager has created the namespace's "default" ServiceAccount.
    def exists() -> bool:
        sas = core.list_namespaced_service_account(namespace, field_selector="metadata.name=default")
        return bool(sas.items)

    wait_for(exists, f"the default ServiceAccount in namespace {namespace}", 30, 0.1)
