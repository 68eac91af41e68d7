"""Each pod template of a manifest, created as a Pod with `dryRun=All` on the cluster: the exact verdict of
what the operator, the Job controller or JobSet will create (pod validation, PodSecurity admission, pod
webhooks), which a dry run of the PyTorchJob or TrainJob itself does not give. Used by
`validate --from-cluster`, kubetrain.api.validate with a connection, and submit's preflight."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kubetrain.errors import SpecError
from kubetrain.fieldpath import PathKey, join_path
from kubetrain.kube.connection import Connection
from kubetrain.kube.errors import NETWORK_ERRORS, ApiError, BadRequest, Forbidden, Invalid, api_message, translate
from kubetrain.rules.k8s.templates import pod_templates
from kubetrain.validate.engine import Issue
from kubetrain.yamlsrc import line_for, parse_documents

Post = Callable[[str, dict[str, Any]], Any]  # dry-run create (namespace, pod); raises the client's API error
REJECTED = (BadRequest, Forbidden, Invalid)


def as_pod(obj: dict[str, Any], template: Any) -> dict[str, Any]:
    """A pod template as the Pod its controller would create (the training-operator sets restartPolicy)."""
    template = copy.deepcopy(template) if isinstance(template, dict) else {}
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    spec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    if obj.get("kind") == "PyTorchJob":
        spec["restartPolicy"] = "OnFailure"
    name = str((obj.get("metadata") or {}).get("name") or "pod")[:50]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": f"{name}-dryrun"}, "spec": spec}


def pod_template_problems(post: Post, obj: dict[str, Any], namespace: str) -> list[tuple[PathKey, str]]:
    """(template path, the server's message) for each pod template the API server would refuse as a Pod.
    Templates of a Pod or a built-in workload are checked by the object's own dry run, and a TrainJob's
    runtime patches are only fragments, so neither is sent."""
    problems = []
    for template in pod_templates(obj):
        if template.stage is None or template.partial:
            continue
        try:
            post(namespace, as_pod(obj, template.template))
        except REJECTED as exc:
            message = api_message(exc)
            if isinstance(exc, Forbidden) and "admission" not in message and "PodSecurity" not in message:
                continue  # RBAC: the user may not create pods, the operator may; nothing to say about the pod
            problems.append((template.path, f"the API server rejects this pod template as a Pod ({template.stage}): "
                             f"{message}"))
    return problems


def source_issues(post: Post, sources: list[tuple[str, str]], default_namespace: str) -> list[Issue]:
    """`validate --from-cluster`: pod_template_problems for every object of every source, as report issues
    on the template's line (documents numbered as validate_sources numbers them)."""
    issues = []
    for source, text in sources:
        try:
            docs = parse_documents(text, source)
        except SpecError:
            continue  # already reported by the offline pass
        objects = [d for d in docs if d.data is not None]
        for index, doc in enumerate(objects, 1):
            obj = doc.data
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                continue
            namespace = str(obj["metadata"].get("namespace") or default_namespace)
            for path, message in pod_template_problems(post, obj, namespace):
                issues.append(Issue("error", source, index, str(obj.get("kind")), str(obj["metadata"].get("name")),
                                    join_path(path), message, line_for(path, doc.lines)))
    return issues


def cluster_pod_issues(connection: Connection, sources: list[tuple[str, str]]) -> list[Issue]:
    """source_issues with each pod dry-run created on `connection`'s cluster; an unreachable cluster or a
    refused request is one ClusterError."""
    def post(namespace: str, pod: dict[str, Any]) -> Any:
        return connection.rest.json("POST", f"/api/v1/namespaces/{namespace}/pods", {"dryRun": "All"}, pod)

    try:
        return source_issues(post, sources, connection.namespace())
    except (ApiError, *NETWORK_ERRORS) as exc:  # a ClusterError already says what happened
        raise translate(exc, "dry-run create pods", connection.server) from None
