"""The one permission check (`kubectl auth can-i`): a SelfSubjectAccessReview. Used by preflight and doctor."""

from __future__ import annotations

from kubernetes import client


def can_i(api: client.ApiClient, verb: str, group: str, resource: str, namespace: str | None) -> tuple[bool, str]:
    """(allowed, the authorizer's reason). `resource` may name a subresource: "pods/exec"."""
    resource, _, subresource = resource.partition("/")
    attributes = client.V1ResourceAttributes(verb=verb, group=group, resource=resource,
                                             subresource=subresource or None, namespace=namespace)
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=attributes))
    status = client.AuthorizationV1Api(api).create_self_subject_access_review(review).status
    return (bool(status.allowed), str(status.reason or "")) if status else (False, "no status")
