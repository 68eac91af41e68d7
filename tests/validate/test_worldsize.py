"""`kubetrain validate`: process counts against the GPUs of every PyTorchJob replica, TrainJob and training
runtime, with the line of the field. Semantic rules need no CRD schema, so an empty store is enough here."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kubetrain.validate import SchemaStore, validate_sources


def _issues(obj: dict[str, Any]) -> list[tuple[str, str, int | None, str]]:
    report = validate_sources([("job.yaml", yaml.safe_dump(obj, sort_keys=False))], SchemaStore(),
                              ignore_missing_schemas=True)
    return [(i.severity, i.path, i.line, i.message) for i in report.issues
            if ("per pod" in i.message or "nvidia.com/gpu" in i.message) and "/dev/shm" not in i.message]


def _replica(gpus: int, command: list[str] | None = None) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    container = {"name": "pytorch", "image": "example.com/t:1", "command": command or ["torchrun", "train.py"],
                 "resources": resources}
    return {"replicas": 1, "template": {"spec": {"containers": [container]}}}


def pytorchjob(nproc: Any, master: int, worker: int | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if nproc is not None:
        spec["nprocPerNode"] = nproc
    spec["pytorchReplicaSpecs"] = {"Master": _replica(master)}
    if worker is not None:
        spec["pytorchReplicaSpecs"]["Worker"] = _replica(worker)
    spec.update(extra)
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": spec}


@pytest.mark.parametrize(("nproc", "master", "worker", "expected"), [
    ("8", 8, 8, []),
    ("auto", 4, 4, []),
    ("gpu", 2, None, []),
    ("1", 0, 0, []),
    ("16", 8, 8, [("error", "spec.nprocPerNode", 6)]),
    ("4", 8, 8, [("warning", "spec.nprocPerNode", 6)]),
    ("8", 8, 4, [("error", "spec.nprocPerNode", 6)]),  # the Worker has fewer GPUs than the Master
    ("gpu", 0, None, [("error", "spec.nprocPerNode", 6)]),
    ("auto", 0, 0, [("warning", "spec.nprocPerNode", 6)]),  # one finding, not one per replica
    ("cpu", 4, None, [("warning", "spec.nprocPerNode", 6)]),
])
def test_pytorchjob_nproc_against_each_replicas_gpus(nproc: str, master: int, worker: int | None,
                                                     expected: list[tuple[str, str, int]]) -> None:
    assert [f[:3] for f in _issues(pytorchjob(nproc, master, worker))] == expected


def test_the_message_names_the_replica_and_what_to_do() -> None:
    [(_, _, _, message)] = _issues(pytorchjob("8", 8, 4))
    assert message == ("8 processes per pod on 4 GPU(s): local ranks 4..7 have no GPU of their own (cuda "
                       "'invalid device ordinal', or NCCL 'Duplicate GPU detected'); set it to 4 [Worker (4 GPU(s) "
                       "per pod)]")


def test_elastic_nproc_is_read_from_the_elastic_policy() -> None:
    job = pytorchjob(None, 4, 4, elasticPolicy={"nProcPerNode": 8, "rdzvBackend": "c10d"})
    assert [f[:3] for f in _issues(job)] == [("error", "spec.elasticPolicy.nProcPerNode", 34)]


def test_unset_nproc_is_the_operators_auto_where_torchrun_reads_it() -> None:
    cpu_torchrun = pytorchjob(None, 0)
    [(severity, path, line, message)] = _issues(cpu_torchrun)
    assert (severity, path, line) == ("warning", "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]", 12)
    assert message.startswith("spec.nprocPerNode is unset (the operator's default: auto) for Master")
    plain_python = pytorchjob(None, 0)
    plain_python["spec"]["pytorchReplicaSpecs"]["Master"] = _replica(0, ["python", "train.py"])
    assert _issues(plain_python) == []  # PET_NPROC_PER_NODE means nothing without torchrun
    assert _issues(pytorchjob(None, 8)) == []  # auto counts the pod's GPUs


def test_a_torchrun_flag_in_the_command_wins_over_nproc_per_node() -> None:
    job = pytorchjob(None, 0)
    job["spec"]["pytorchReplicaSpecs"]["Master"] = _replica(0, ["torchrun", "--nproc_per_node=1", "train.py"])
    assert _issues(job) == []  # explicit: not the operator's auto
    job = pytorchjob("4", 4)
    job["spec"]["pytorchReplicaSpecs"]["Master"] = _replica(4, ["torchrun", "--nproc-per-node", "8", "train.py"])
    [(severity, path, _, message)] = _issues(job)
    assert (severity, path) == ("error", "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]")
    assert message.startswith("--nproc-per-node 8 in the command for Master (4 GPU(s) per pod): 8 processes")


def test_the_flag_is_read_as_torchrun_reads_it_the_same_parser_as_render() -> None:
    """The manifest check and render parse a command with the one torchrun parser: a flag after the script
    is the script's own argument, and kubetrain's rendered `sh -c WRAPPER torchrun ARGS` is read past the
    wrapper. A word that merely contains "torchrun" starts no torchrun."""
    script_flag = pytorchjob("4", 4)
    script_flag["spec"]["pytorchReplicaSpecs"]["Master"] = _replica(4, ["torchrun", "train.py", "--nproc-per-node",
                                                                        "8"])
    assert _issues(script_flag) == []  # train.py's --nproc-per-node, not torchrun's: 4 processes on 4 GPUs
    wrapped = pytorchjob("4", 4)
    wrapped["spec"]["pytorchReplicaSpecs"]["Master"] = _replica(4, ["sh", "-c", "torchrun \"$@\"", "torchrun",
                                                                    "--nproc_per_node=8", "train.py"])
    assert [f[:2] for f in _issues(wrapped)] == [("error", "spec.pytorchReplicaSpecs.Master.template.spec."
                                                            "containers[0]")]
    named_like_it = pytorchjob(None, 0)
    named_like_it["spec"]["pytorchReplicaSpecs"]["Master"] = _replica(0, ["python", "torchrun_notes.py"])
    assert _issues(named_like_it) == []  # no torchrun runs, so PET_NPROC_PER_NODE is read by nobody


def trainjob(procs: Any, resources: dict[str, Any] | None) -> dict[str, Any]:
    trainer: dict[str, Any] = {"image": "example.com/t:1", "numNodes": 2}
    if procs is not None:
        trainer["numProcPerNode"] = procs
    if resources is not None:
        trainer["resourcesPerNode"] = resources
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer}}


GPUS = {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}


@pytest.mark.parametrize(("procs", "resources", "expected"), [
    (4, GPUS, []),
    (None, GPUS, []),  # Trainer derives 4 from resourcesPerNode
    (8, GPUS, [("error", "spec.trainer.numProcPerNode", 11)]),
    (2, GPUS, [("warning", "spec.trainer.numProcPerNode", 11)]),
    (None, {"limits": {"memory": "64Gi"}}, [("warning", "spec.trainer.resourcesPerNode", 11)]),
    (None, None, []),  # the runtime's resources and count apply, unchanged
    (2, {"limits": {"memory": "64Gi"}}, []),  # an explicit count: the user's choice
])
def test_trainjob_count_against_resources_per_node(procs: Any, resources: dict[str, Any] | None,
                                                   expected: list[tuple[str, str, int]]) -> None:
    assert [f[:3] for f in _issues(trainjob(procs, resources))] == expected


def test_a_runtime_declared_gpu_count_is_checked_against_its_own_count() -> None:
    def runtime(procs: Any, gpus: int) -> dict[str, Any]:
        node = {"name": "node", "image": "example.com/t:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        job = {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [node]}}}}}
        return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "r"},
                "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": procs}},
                         "template": {"spec": {"replicatedJobs": [job]}}}}

    assert [f[:3] for f in _issues(runtime(1, 4))] == [("warning", "spec.mlPolicy.torch.numProcPerNode", 9)]
    assert [f[:3] for f in _issues(runtime(8, 4))] == [("error", "spec.mlPolicy.torch.numProcPerNode", 9)]
    assert _issues(runtime(4, 4)) == []
    assert _issues(runtime("auto", 4)) == []  # Trainer resolves auto from the resources itself
