"""The rendering rules, one by one, on the pure renderer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.errors import RenderError
from kubetrain.jobspec.load import validate_data
from kubetrain.jobspec.model import TrainingJob
from kubetrain.render import RenderOptions, render_job
from kubetrain.render.code import collect_code
from kubetrain.render.launch import container_command
from kubetrain.render.yamlout import dump_yaml


def job(**spec: Any) -> TrainingJob:
    base: dict[str, Any] = {"image": "repo/img:1", "command": ["python", "-m", "train"]}
    data = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j"},
            "spec": base | spec}
    return validate_data(data, {}, "kubetrain.yaml")


def pytorchjob(**spec: Any) -> dict[str, Any]:
    return render_job(job(**spec))[-1]


def pod(obj: dict[str, Any], replica: str = "Master") -> dict[str, Any]:
    return obj["spec"]["pytorchReplicaSpecs"][replica]["template"]["spec"]  # type: ignore[no-any-return]


def env(obj: dict[str, Any], replica: str = "Master") -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod(obj, replica)["containers"][0]["env"]}


def test_fixed_size_job_is_master_plus_workers() -> None:
    obj = pytorchjob(nodes=4, gpusPerNode=8)
    replicas = obj["spec"]["pytorchReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Master": 1, "Worker": 3}
    assert obj["spec"]["nprocPerNode"] == "8"
    assert "elasticPolicy" not in obj["spec"]
    assert list(pytorchjob(nodes=1)["spec"]["pytorchReplicaSpecs"]) == ["Master"]


def test_elastic_job_is_worker_only_with_policy() -> None:
    obj = pytorchjob(nodes=2, elastic={"minNodes": 1, "maxNodes": 4, "maxRestarts": 7})
    assert list(obj["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    assert obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert obj["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4, "maxRestarts": 7,
                                            "rdzvBackend": "c10d"}
    assert env(obj, "Worker")["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env(pytorchjob(nodes=2))


def test_container_launches_through_torchrun() -> None:
    container = pod(pytorchjob(args=["--lr", "0.1"]))["containers"][0]
    assert container["name"] == "pytorch"
    assert container["command"] == container_command()
    assert container["args"] == ["-m", "train", "--lr", "0.1"]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}]
    script = pod(pytorchjob(command=["python3", "train.py", "--x"], code={"path": "."}))["containers"][0]
    assert script["args"] == ["/workspace/train.py", "--x"]
    other = pod(pytorchjob(command=["bash", "-c", "echo hi"]))["containers"][0]
    assert other["args"] == ["--no-python", "bash", "-c", "echo hi"]
    trainer = pod(pytorchjob(command=None, train={"model": "m:f", "dataset": "d:g"}))["containers"][0]
    assert trainer["args"] == ["-m", "kubetrain.runtime"]


def test_gpu_limits_equal_requests_and_shm_counts_against_memory() -> None:
    resources = pod(pytorchjob(gpusPerNode=2, resources={"cpu": "8", "memory": "30Gi"}, shmSize="2Gi"))[
        "containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": "2"},
                         "limits": {"memory": "32Gi", "nvidia.com/gpu": "2"}}


@pytest.mark.parametrize(("memory", "shm", "expected"), [
    ("32Gi", None, "8Gi"), ("2Gi", None, "1Gi"), (None, None, "2Gi"), ("64Gi", "500Mi", "500Mi")])
def test_shm_size_defaults(memory: str | None, shm: str | None, expected: str) -> None:
    spec: dict[str, Any] = {"gpusPerNode": 1}
    if memory:
        spec["resources"] = {"memory": memory}
    if shm:
        spec["shmSize"] = shm
    volumes = pod(pytorchjob(**spec))["volumes"]
    assert volumes[0] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": expected}}
    assert pod(pytorchjob(**spec))["containers"][0]["volumeMounts"][0] == {"name": "dshm", "mountPath": "/dev/shm"}


def test_debug_preset_and_gpu_defaults() -> None:
    assert env(pytorchjob(gpusPerNode=1))["NCCL_DEBUG"] == "WARN"
    debug = env(pytorchjob(gpusPerNode=1, debug=True, env={"CUDA_LAUNCH_BLOCKING": "0"}))
    assert debug["NCCL_DEBUG"] == "INFO"
    assert debug["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert debug["TORCH_SHOW_CPP_STACKTRACES"] == "1"
    assert debug["CUDA_LAUNCH_BLOCKING"] == "0"  # the user's own value wins over the preset
    assert "NCCL_DEBUG" not in env(pytorchjob())


def test_gpu_pods_are_protected_from_autoscaler_eviction() -> None:
    annotations = pytorchjob(gpusPerNode=1)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"][
        "annotations"]
    assert annotations == {"karpenter.sh/do-not-disrupt": "true",
                           "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_labels_annotations_and_run_policy() -> None:
    obj = pytorchjob(scheduling={"queue": "team-a"}, runPolicy={"ttlSecondsAfterFinished": 60})
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/name": "j", "app.kubernetes.io/managed-by": "kubetrain",
                                         "kubetrain.dev/job": "j", "kueue.x-k8s.io/queue-name": "team-a"}
    assert len(obj["metadata"]["annotations"]["kubetrain.dev/spec-hash"]) == 16
    assert obj["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 10, "ttlSecondsAfterFinished": 60}
    assert "runPolicy" not in obj["spec"]["pytorchReplicaSpecs"]["Master"]


def test_restrictive_security_context() -> None:
    context = pod(pytorchjob())["containers"][0]["securityContext"]
    assert context == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                       "seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": False}
    built = pod(pytorchjob(build={}))["containers"][0]["securityContext"]
    assert built["runAsNonRoot"] is True
    explicit = pod(pytorchjob(security={"runAsNonRoot": True, "runAsUser": 1000, "readOnlyRootFilesystem": True}))
    assert explicit["containers"][0]["securityContext"]["runAsUser"] == 1000


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(("placement", "selector", "tolerations", "runtime_class"), [
    ({"cloud": "gke", "gpuType": "nvidia-l4"}, {"cloud.google.com/gke-accelerator": "nvidia-l4"}, [GPU_TOLERATION],
     None),
    ({"cloud": "eks", "gpuType": "l4"}, {"eks.amazonaws.com/instance-gpu-name": "l4"}, [GPU_TOLERATION], None),
    ({"cloud": "eks-karpenter", "gpuType": "a10g"}, {"karpenter.k8s.aws/instance-gpu-name": "a10g"},
     [GPU_TOLERATION], None),
    ({"cloud": "aks"}, {"kubernetes.azure.com/accelerator": "nvidia"},
     [GPU_TOLERATION, {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}], None),
    ({"cloud": "generic", "gpuType": "NVIDIA-A100-SXM4-80GB"}, {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
     [GPU_TOLERATION], None),
    ({"cloud": "kind"}, {"nvidia.com/gpu.present": "true"}, [GPU_TOLERATION], "nvidia"),
    ({"cloud": "none"}, None, [GPU_TOLERATION], None),
    ({"cloud": "gke", "gpuType": "nvidia-l4", "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-a100",
                                                                "pool": "a"},
      "tolerations": [{"key": "x", "operator": "Exists"}]},
     {"cloud.google.com/gke-accelerator": "nvidia-a100", "pool": "a"}, [GPU_TOLERATION,
                                                                        {"key": "x", "operator": "Exists"}], None),
])
def test_cloud_placement_profiles(placement: dict[str, Any], selector: dict[str, str] | None,
                                  tolerations: list[dict[str, str]], runtime_class: str | None) -> None:
    spec = pod(pytorchjob(gpusPerNode=1, placement=placement))
    assert spec.get("nodeSelector") == selector
    assert spec["tolerations"] == tolerations
    assert spec.get("runtimeClassName") == runtime_class


def test_cpu_jobs_get_no_gpu_placement() -> None:
    spec = pod(pytorchjob(placement={"cloud": "kind"}))
    assert "tolerations" not in spec and "nodeSelector" not in spec and "runtimeClassName" not in spec


def test_code_configmap_is_content_addressed_and_mounted(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "train.py").write_text("print('v1')\n")
    (tmp_path / "pkg" / "weights.bin").write_bytes(b"\x00\xff")
    spec = job(code={"path": "."})
    first = render_job(spec, RenderOptions(code=collect_code(tmp_path)))
    configmap, obj = first
    assert configmap["metadata"]["name"].startswith("j-code-")
    assert configmap["immutable"] is True
    assert configmap["data"] == {"train.py": "print('v1')\n"}
    assert configmap["binaryData"] == {"pkg.weights.bin": "AP8="}
    volume = pod(obj)["volumes"][-1]
    assert volume == {"name": "code", "configMap": {"name": configmap["metadata"]["name"], "items": [
        {"key": "pkg.weights.bin", "path": "pkg/weights.bin"}, {"key": "train.py", "path": "train.py"}]}}
    assert pod(obj)["containers"][0]["workingDir"] == "/workspace"
    (tmp_path / "train.py").write_text("print('v2')\n")
    second = render_job(spec, RenderOptions(code=collect_code(tmp_path)))
    assert second[0]["metadata"]["name"] != configmap["metadata"]["name"]


def test_code_over_the_configmap_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_bytes(b"x" * (1024 * 1024 + 1))
    with pytest.raises(RenderError, match=r"spec.code.path: .* holds 1.00 MiB but a ConfigMap holds at most 1 MiB "
                                          r"\(largest: data.csv \(1024 KiB\)\)"):
        collect_code(tmp_path)


def test_rendering_is_deterministic() -> None:
    spec = job(nodes=3, gpusPerNode=2, env={"B": "2", "A": "1"}, placement={"cloud": "gke", "gpuType": "nvidia-l4"})
    assert dump_yaml(render_job(spec)) == dump_yaml(render_job(spec))
    assert dump_yaml(render_job(spec)) == dump_yaml(render_job(job(nodes=3, gpusPerNode=2, env={"B": "2", "A": "1"},
                                                                   placement={"cloud": "gke", "gpuType": "nvidia-l4"})))


def test_trainjob_shape() -> None:
    obj = render_job(job(target="trainjob", nodes=3, gpusPerNode=4), target=None)[-1]
    assert obj["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert obj["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = obj["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 4)
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "4"
    patch = obj["spec"]["runtimePatches"][0]
    assert patch["manager"] == "kubetrain.dev/kubetrain"
    containers = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["node"]
