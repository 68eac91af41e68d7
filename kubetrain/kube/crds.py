"""Read CustomResourceDefinitions from the live cluster: the one CRD read of `validate --from-cluster`,
`submit` (which validates against the cluster's own CRD) and the Python API. REST only (no kubernetes
package import)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubetrain.kube.errors import ApiError, cluster_errors

if TYPE_CHECKING:
    from kubetrain.kube.connection import Connection

TRAINING_GROUPS = frozenset({"kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io", "kueue.x-k8s.io"})
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def source_of(connection: Connection) -> str:
    return f"cluster {connection.context or 'in-cluster'}"


def training_crds(connection: Connection) -> list[tuple[dict[str, Any], str]]:
    """The cluster's CRDs of the training-related API groups, with their source; a ClusterError (one line,
    naming the cause) when they cannot be listed."""
    with cluster_errors("list CustomResourceDefinitions", connection.rest.server):
        items = connection.rest.get(CRDS).get("items") or []
    # Items of a list carry no apiVersion/kind of their own (the list has them).
    return [({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", **crd},
             source_of(connection)) for crd in items if crd.get("spec", {}).get("group") in TRAINING_GROUPS]


def crd_if_readable(connection: Connection, name: str) -> list[tuple[dict[str, Any], str]]:
    """[(the CRD `name`, source)], or [] when it is missing or forbidden: callers fall back to cached schemas,
    and preflight says which it was. An unreachable cluster raises (a ClusterError, exit 3)."""
    try:
        return [(connection.rest.get(f"{CRDS}/{name}"), source_of(connection))]
    except ApiError:
        return []
