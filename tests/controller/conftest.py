"""Fixtures of the operator tests: the install (as admin), the ServiceAccount kubeconfig, controller processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.controller.operator_env import Operator, install, sa_kubeconfig

FAST = ("--lease-duration", "4", "--progress-interval", "1", "--workers", "4")


@pytest.fixture(scope="module")
def sa_config(controlplane: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    admin = controlplane.api_client()
    install(admin)
    return sa_kubeconfig(admin, controlplane.kubeconfig, tmp_path_factory.mktemp("sa") / "kubeconfig")


@pytest.fixture
def start(sa_config: Path, namespace: str, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    """Start controllers watching the test's namespace, on a Lease of their own; all stopped afterwards."""
    started: list[Operator] = []

    def _start(*args: str, name: str = "op") -> Operator:
        op = Operator(sa_config, tmp_path / f"{name}-{len(started)}.log", "--watch-namespace", namespace,
                      "--lease-name", f"lease-{namespace}", *FAST, *args, name=name)
        started.append(op)
        return op

    yield _start
    for op in started:
        op.stop()
