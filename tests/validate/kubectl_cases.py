"""Manifests whose verdict only the API server (or what the operators create) gives, each with that verdict:
the cases `validate --exact` must get right and the offline mode must never call invalid when they are valid.
Verdicts: the suite's real control plane (kube-apiserver 1.36, training-operator v1.9.4, Trainer v2.3.0,
JobSet v0.12.0) under `kubectl apply --validate=strict` (client-side apply)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    valid: bool  # the API server's verdict (and what the operators' creations meet)
    field: str = ""  # the field an exact error names (a prefix of the path)
    offline: str = "valid"  # the offline mode's verdict: valid, warning (not sure) or error
    server_side_valid: bool | None = None  # with `--server-side`, where it differs


def _pod(extra: str = "", container: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
{extra}  containers:
  - name: c
    image: busybox:1.36
{container}"""


PYTORCHJOB = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: {name}}}
spec:
  runPolicy: {{ttlSecondsAfterFinished: 60}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
{containers}"""
PYTORCH_CONTAINER = """          - name: pytorch
            image: busybox:1.36
            command: [python, train.py]
"""
BIG_CONFIGMAP = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                                "data": {"blob": "x" * (300 * 1024)}})

CASES = [
    Case("env-value-y", _pod(container="    env:\n    - {name: DEBUG, value: y}\n"), False,
         "spec.containers[0].env[0].value", "error"),
    Case("env-value-quoted-y", _pod(container="    env:\n    - {name: DEBUG, value: \"y\"}\n"), True),
    Case("configmap-300kb", BIG_CONFIGMAP, False, "metadata.annotations", "warning", server_side_valid=True),
    Case("job-memory-16GB", """apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: c
        image: busybox:1.36
        resources:
          limits: {memory: 16GB}
""", False, "", "error"),
    Case("pod-priority-without-class", _pod("  priority: 1000\n"), False, "", "warning"),
    Case("pytorchjob-second-port-23456", PYTORCHJOB.format(name="ports", containers=PYTORCH_CONTAINER + """\
            ports:
            - {name: metrics, containerPort: 23456}
"""), False, "spec.pytorchReplicaSpecs.Master", "error"),
    Case("pytorchjob-named-default-port", PYTORCHJOB.format(name="ports", containers=PYTORCH_CONTAINER + """\
            ports:
            - {name: pytorchjob-port, containerPort: 23456}
"""), True),
    Case("trainjob-name-52", f"""apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {"t" * 52}}}
spec:
  runtimeRef: {{name: torch-distributed}}
""", False, "metadata.name", "error"),
    Case("trainjob-name-48", f"""apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: {"t" * 48}}}
spec:
  runtimeRef: {{name: torch-distributed}}
""", True),
    Case("pytorchjob-resources-empty", PYTORCHJOB.format(name="empty", containers=PYTORCH_CONTAINER + """\
            resources:
            env:
          nodeSelector:
"""), True),
    Case("deployment-resources-empty", """apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers:
      - name: c
        image: busybox:1.36
        resources:
""", True),
    Case("pytorchjob-containers-empty", PYTORCHJOB.format(name="none", containers="          []\n").replace(
        "containers:\n          []", "containers: []"), False, "spec.pytorchReplicaSpecs.Master", "error"),
    Case("duplicate-key", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Upper\n  name: lower\n", True,
         offline="warning"),
    Case("pod-cpu-true", _pod(container="    resources:\n      requests: {cpu: true}\n"), False,
         "", "error"),
]
