"""`kubetrain tensorboard NAME --cluster`: the TensorBoard pod made from a running job's rank 0 pod (same image,
node and volume, read-only; owned by the job so it goes with it), and the one-line refusals."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubetrain.errors import ClusterError
from kubetrain.jobs.tensorboard import tensorboard_pod

JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "digits", "namespace": "ml", "uid": "u-1"}}
RANK0 = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "digits-master-0", "namespace": "ml"},
         "spec": {"nodeName": "node-a", "securityContext": {"runAsNonRoot": True},
                  "imagePullSecrets": [{"name": "registry"}],
                  "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "digits-ckpt"}},
                              {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                  "containers": [{"name": "pytorch", "image": "repo/digits:kt-1",
                                  "securityContext": {"readOnlyRootFilesystem": True},
                                  "env": [{"name": "TENSORBOARD_LOGDIR", "value": "/ckpt/tb"}],
                                  "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"},
                                                   {"name": "dshm", "mountPath": "/dev/shm"}]}]}}


def with_logdir(value: str) -> dict[str, Any]:
    pod = copy.deepcopy(RANK0)
    pod["spec"]["containers"][0]["env"] = [{"name": "TENSORBOARD_LOGDIR", "value": value}] if value else []
    return pod


def test_the_pod_reads_the_jobs_volume_on_its_node_and_goes_with_the_job() -> None:
    pod = tensorboard_pod(JOB, RANK0, "pytorch")
    assert pod["metadata"]["name"] == "digits-tensorboard" and pod["metadata"]["namespace"] == "ml"
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                                   "name": "digits", "uid": "u-1", "blockOwnerDeletion": True}]
    spec = pod["spec"]
    assert spec["nodeName"] == "node-a"  # a ReadWriteOnce claim mounts on one node
    assert spec["imagePullSecrets"] == [{"name": "registry"}] and spec["securityContext"] == {"runAsNonRoot": True}
    (container,) = spec["containers"]
    assert container["image"] == "repo/digits:kt-1"
    assert container["command"] == ["python", "-m", "tensorboard.main", "--logdir", "/ckpt/tb", "--host", "0.0.0.0",
                                    "--port", "6006"]
    assert [v["name"] for v in spec["volumes"]] == ["ckpt", "tmp"]  # not the shared memory
    assert container["volumeMounts"] == [{"name": "ckpt", "mountPath": "/ckpt", "readOnly": True},
                                         {"name": "tmp", "mountPath": "/tmp"}]
    assert container["env"] == [{"name": "TMPDIR", "value": "/tmp"}]  # a read-only root: TensorBoard's temp files


@pytest.mark.parametrize(("logdir", "message"), [
    ("", "digits: its pods have no TENSORBOARD_LOGDIR: the job sets no spec.tracking.tensorboard"),
    ("s3://bucket/tb", "digits: its event files are in s3://bucket/tb: serve them here with "
                       "`kubetrain tensorboard --logdir s3://bucket/tb`"),
    ("/scratch/tb", "digits: TENSORBOARD_LOGDIR=/scratch/tb is on no volume of its pods: the files went with "
                    "their containers"),
    ("/ckptx/tb", "digits: TENSORBOARD_LOGDIR=/ckptx/tb is on no volume"),
])
def test_a_job_whose_event_files_cannot_be_served_is_one_line(logdir: str, message: str) -> None:
    with pytest.raises(ClusterError) as raised:
        tensorboard_pod(JOB, with_logdir(logdir), "pytorch")
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
