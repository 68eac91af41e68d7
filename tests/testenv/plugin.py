"""pytest plugin: the `controlplane` marker and fixtures.

Enable with ``pytest_plugins = ["tests.testenv.plugin"]`` in tests/conftest.py.

* ``controlplane`` (session): a started ControlPlane (kubeconfig, api_client(),
  set_pod_phase(), set_pod_logs(), ...). Tests using it are marked
  ``controlplane`` automatically.
* ``namespace`` (function): a fresh namespace per test, deleted afterwards.
* ``k8s`` (function): an admin ApiClient.

Missing binaries: with CI=true the fixture fails (a CI run must never silently
skip the integration tests); locally it skips and says to run `make testenv`.
Set KUBETRAIN_TESTENV_KEEP=1 to keep the temp dir (logs, kubeconfig) for debugging.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator

import kubernetes
import pytest

from .binaries import PREPARE_HINT, MissingBinaries
from .controlplane import ControlPlane

MARKER = "controlplane"
FIXTURES = {"controlplane", "namespace", "k8s"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: needs the real Kubernetes control plane from `make testenv` (tests/testenv)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(MARKER)


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
    # Background deletion: the namespace controller and kwok clean up.
    core.delete_namespace(name, propagation_policy="Background")


def _wait_default_service_account(core: kubernetes.client.CoreV1Api, namespace: str) -> None:
    # The ServiceAccount admission plugin rejects pods until the controller
    # manager has created the namespace's "default" ServiceAccount.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.1)
    raise TimeoutError(f"no default ServiceAccount in namespace {namespace}")
