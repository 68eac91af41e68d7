"""coordination.k8s.io/v1 Leases as plain dicts: read, create, replace (for kubetrain.controller.leader)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException


class LeaseConflict(Exception):
    """Someone else wrote the Lease first (409 Conflict or 422 on a stale resourceVersion)."""


class LeaseError(Exception):
    """Any other API failure on the Lease (its str() is the API's reason)."""


class Leases:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self._coord = client.CoordinationV1Api(api)
        self.namespace, self.name = namespace, name

    def read(self) -> dict[str, Any] | None:
        """The Lease, None if there is none."""
        try:
            response = self._coord.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise LeaseError(exc.reason) from None
        lease: dict[str, Any] = json.loads(response.data)  # type: ignore[attr-defined]
        return lease

    def create(self, body: dict[str, Any]) -> None:
        with _translated():
            self._coord.create_namespaced_lease(self.namespace, body)  # type: ignore[arg-type]

    def replace(self, body: dict[str, Any]) -> None:
        """Replace (PUT): fails with LeaseConflict when `body`'s resourceVersion is no longer current."""
        with _translated():
            self._coord.replace_namespaced_lease(self.name, self.namespace, body)  # type: ignore[arg-type]


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except ApiException as exc:
        if exc.status in (409, 422):
            raise LeaseConflict(exc.reason) from None
        raise LeaseError(exc.reason) from None
