"""The one permission check (`kubectl auth can-i`): a SelfSubjectAccessReview. Used by preflight and doctor."""

from __future__ import annotations

from kubetrain.kube.objects import status_of
from kubetrain.kube.rest import Rest


def can_i(rest: Rest, verb: str, group: str, resource: str, namespace: str | None) -> tuple[bool, str]:
    """(allowed, the authorizer's reason). `resource` may name a subresource: "pods/exec"."""
    resource, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": subresource or None,
                  "namespace": namespace}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {k: v for k, v in attributes.items() if v is not None}}}
    answer = rest.json("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
    status = status_of(answer)
    return (bool(status.get("allowed")), str(status.get("reason") or "")) if status else (False, "no status")
