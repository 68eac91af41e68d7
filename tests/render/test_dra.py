"""GPUs through Dynamic Resource Allocation: how `gpus` relates to `gpusPerNode`, what renders, and what is
refused with its field."""

from __future__ import annotations

import pytest

from kubetrain.errors import SpecError
from kubetrain.render import RenderOptions, render_job, render_warnings
from tests.render.test_rules import job, pod


def _kinds(objects: list[dict[str, object]]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}" for o in objects]  # type: ignore[index]


def test_gpus_count_is_gpus_per_node() -> None:
    spec = job(gpus={"via": "dra", "count": 4}).spec
    assert spec.gpusPerNode == 4 and spec.procs_per_node == 4


def test_dra_renders_a_template_per_replica_type_and_no_gpu_limit() -> None:
    objects = render_job(job(nodes=3, gpusPerNode=2, gpus={"via": "dra"}))
    assert _kinds(objects) == ["ResourceClaimTemplate/j-master-gpus", "ResourceClaimTemplate/j-worker-gpus",
                               "PyTorchJob/j"]
    job_obj = objects[-1]
    assert job_obj["spec"]["nprocPerNode"] == "2"  # world size follows the claimed count: 3 pods x 2
    for replica in ("Master", "Worker"):
        spec = pod(job_obj, replica)
        assert spec["resourceClaims"] == [{"name": "gpus",
                                           "resourceClaimTemplateName": f"j-{replica.lower()}-gpus"}]
        resources = spec["containers"][0]["resources"]
        assert resources["claims"] == [{"name": "gpus"}]
        assert "nvidia.com/gpu" not in str(resources)
    request = objects[0]["spec"]["spec"]["devices"]["requests"][0]
    assert request == {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                   "allocationMode": "ExactCount", "count": 2}}


def test_trainjob_runs_on_a_derived_runtime_that_claims_the_gpus() -> None:
    objects = render_job(job(target="trainjob", nodes=2, gpusPerNode=4, gpus={"via": "dra"}))
    assert _kinds(objects) == ["ResourceClaimTemplate/j-node-gpus", "TrainingRuntime/j-dra", "TrainJob/j"]
    runtime, trainjob = objects[1], objects[2]
    pod_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod_spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "j-node-gpus"}]
    assert trainjob["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                              "name": "j-dra"}
    assert trainjob["spec"]["trainer"]["numProcPerNode"] == 4
    # Trainer v2.3.0 drops claims from resourcesPerNode: the container's resources live in the runtime
    assert "resourcesPerNode" not in trainjob["spec"]["trainer"]
    assert pod_spec["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]


def test_auto_renders_the_plugin_offline_and_dra_when_submit_found_it() -> None:
    spec = job(gpusPerNode=1, gpus={"via": "auto"})
    assert _kinds(render_job(spec)) == ["PyTorchJob/j"]
    assert any("spec.gpus.via: auto" in w for w in render_warnings(spec))
    objects = render_job(spec, RenderOptions(gpu_via="dra"))
    assert _kinds(objects)[0] == "ResourceClaimTemplate/j-master-gpus"
    assert render_warnings(spec, RenderOptions(gpu_via="dra")) == []


def test_selectors_render_as_cel() -> None:
    expression = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    objects = render_job(job(gpusPerNode=8, gpus={"via": "dra", "selectors": [expression]}))
    exactly = objects[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["selectors"] == [{"cel": {"expression": expression}}]


@pytest.mark.parametrize(("spec", "field", "text"), [
    ({"gpusPerNode": 2, "gpus": {"count": 4}}, "spec.gpus.count", "same number"),
    ({"gpus": {"via": "dra"}}, "spec.gpus.via", "asks for no GPUs"),
    ({"gpusPerNode": 1, "gpus": {"selectors": ["true"]}}, "spec.gpus.selectors", "placement.gpuType"),
    ({"target": "trainjob", "trainingRuntime": "mine", "gpusPerNode": 1, "gpus": {"via": "dra"}}, "spec.gpus.via",
     "trainingRuntime torch-distributed"),
    ({"gpusPerNode": 1, "gpus": {"via": "dra", "selectors": [" "]}}, "spec.gpus.selectors[0]", "CEL"),
    ({"gpusPerNode": 1, "gpus": {"via": "dra", "deviceClass": "GPU"}}, "spec.gpus.deviceClass", ""),
])
def test_refused_with_the_field(spec: dict[str, object], field: str, text: str) -> None:
    with pytest.raises(SpecError) as raised:
        render_job(job(**spec))
    assert any(p.field == field and text in p.message for p in raised.value.problems), raised.value.problems
