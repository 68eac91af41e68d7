"""`kubetrain submit --controller`: hand the TrainingJob itself to the cluster's controller.

The spec has been loaded and checked exactly as for a direct submit; what goes out is the TrainingJob as the
user wrote it (unset fields stay unset, so the controller's defaults apply), server-side applied with the
CLI's field manager. The controller then renders, applies and mirrors status.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from kubetrain.client import targets
from kubetrain.client.apply import APPLY_PATCH, FIELD_MANAGER
from kubetrain.client.errors import as_dict, cluster_errors
from kubetrain.controller.crd import GROUP, KIND, NAME, PLURAL, VERSION
from kubetrain.controller.reconcile import UNRESOLVED_CODE
from kubetrain.errors import ClusterError, Problem, SpecError
from kubetrain.render.context import JOB_LABEL
from kubetrain.spec.load import LoadedSpec

# The TrainingJob API as a Target, for discovery (`served`); its pods carry the child's labels.
TRAININGJOB = targets.Target("trainingjob", GROUP, VERSION, PLURAL, KIND, JOB_LABEL,
                             (("kubetrain-system", "kubetrain-controller"),), "kubetrain controller")


def training_job(loaded: LoadedSpec, namespace: str) -> dict[str, Any]:
    """The object to apply; refuses what the cluster cannot resolve (a local code directory)."""
    job = loaded.job
    if job.spec.code is not None:
        raise SpecError([Problem("spec.code.path", f"--controller: {UNRESOLVED_CODE.split(':')[0]}; submit "
                                 "without --controller, or bake the code into spec.image", loaded.source)])
    body = job.model_dump(mode="json", by_alias=True, exclude_unset=True)
    body["metadata"] = {**body["metadata"], "namespace": namespace}
    return body


def hand_over(api: client.ApiClient, body: dict[str, Any], dry_run: str | None) -> dict[str, Any]:
    """Server-side apply the TrainingJob (client dry run: return it unchanged)."""
    if dry_run == "client":
        return body
    with cluster_errors("discover the kubetrain.dev API"):
        if not targets.served(api, TRAININGJOB):
            raise ClusterError(f"--controller: the cluster does not serve {NAME}: install the operator with "
                               "`kubetrain controller install` (docs/operator.md), or submit without --controller")
    meta = body["metadata"]
    with cluster_errors(f"apply {NAME} {meta['name']} in namespace {meta['namespace']}"):
        response = client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], body, field_manager=FIELD_MANAGER,
            dry_run="All" if dry_run else None, _content_type=APPLY_PATCH, _preload_content=False)
    return as_dict(json.loads(response.data))  # type: ignore[attr-defined]
