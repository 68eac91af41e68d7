"""Read CustomResourceDefinitions from the live cluster (for `kubetrain validate --from-cluster`)."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kubetrain.client.connection import connect
from kubetrain.errors import ClusterError

TRAINING_GROUPS = {"kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io", "kueue.x-k8s.io"}


def cluster_crds(context: str | None = None) -> list[tuple[dict[str, Any], str]]:
    """The cluster's CRDs of the training-related API groups, as plain dicts with their source."""
    connection = connect(context)
    api = client.ApiextensionsV1Api(connection.api)
    try:
        items = api.list_custom_resource_definition().items
    except ApiException as exc:
        raise ClusterError(f"cannot list CustomResourceDefinitions: {exc.status} {exc.reason}") from None
    except HTTPError as exc:
        raise ClusterError(f"cannot reach the cluster: {exc}") from None
    source = f"cluster {connection.context or 'in-cluster'}"
    return [(connection.api.sanitize_for_serialization(crd), source) for crd in items
            if crd.spec.group in TRAINING_GROUPS]
