"""coordination.k8s.io/v1 Leases as plain dicts: read, create, replace (for kubetrain.controller.leader)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubetrain.kube.errors import ApiError, Conflict, Invalid, NotFound
from kubetrain.kube.rest import Rest


class LeaseConflict(Exception):
    """Someone else wrote the Lease first (409 Conflict or 422 on a stale resourceVersion)."""


class LeaseError(Exception):
    """Any other API failure on the Lease (its str() is the API's reason)."""


class Leases:
    def __init__(self, rest: Rest, namespace: str, name: str) -> None:
        self._rest = rest
        self.namespace, self.name = namespace, name
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def read(self) -> dict[str, Any] | None:
        """The Lease, None if there is none."""
        try:
            return self._rest.get(f"{self._path}/{self.name}")
        except NotFound:
            return None
        except ApiError as exc:
            raise LeaseError(exc.reason) from None

    def create(self, body: dict[str, Any]) -> None:
        with _translated():
            self._rest.json("POST", self._path, body=body)

    def replace(self, body: dict[str, Any]) -> None:
        """Replace (PUT): fails with LeaseConflict when `body`'s resourceVersion is no longer current."""
        with _translated():
            self._rest.json("PUT", f"{self._path}/{self.name}", body=body)


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except (Conflict, Invalid) as exc:
        raise LeaseConflict(exc.reason) from None
    except ApiError as exc:
        raise LeaseError(exc.reason) from None
