"""Bases for type-swap fuzzing: every supported kind, with a pod spec that sets most pod fields, so that a
swap reaches every check of kubetrain's offline rules."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from tests.validate.oracle import bases

Obj = dict[str, Any]
# One value of every JSON type, empty and not, plus what YAML makes of `y`, `1e3` and an integer past int64.
SWAPS: list[Any] = [None, [], {}, True, False, 0, -1, "", "x", 1.5, [None], {"a": None}, 2**64, ["x"], [{}],
                    {"a": 1}, "1e3", "-1"]

RICH_CONTAINER: Obj = {
    "name": "pytorch", "image": "busybox:1.36", "command": ["torchrun", "--nproc-per-node", "1"], "args": ["a"],
    "workingDir": "/w", "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
    "env": [{"name": "A", "value": "b"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "P_"}],
    "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1},
                  "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": 1}},
    "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "cfg", "mountPath": "/cfg", "subPath": "a"}],
    "livenessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 10},
    "readinessProbe": {"exec": {"command": ["true"]}, "successThreshold": 1},
    "startupProbe": {"tcpSocket": {"port": "http"}, "failureThreshold": 3},
    "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
    "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
}
RICH_POD_SPEC: Obj = {
    "containers": [RICH_CONTAINER],
    "initContainers": [{"name": "init", "image": "busybox:1.36", "command": ["true"]}],
    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420, "items": [{"key": "a", "path": "a"}]}},
                {"name": "sec", "secret": {"secretName": "s"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "pvc"}}],
    "nodeSelector": {"nvidia.com/gpu.product": "A100"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 5}],
    "affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "demo"}}}}]}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
    "securityContext": {"fsGroup": 1000, "runAsNonRoot": True},
    "dnsPolicy": "ClusterFirst",
    "dnsConfig": {"nameservers": ["10.0.0.1"], "options": [{"name": "ndots", "value": "2"}]},
    "hostAliases": [{"ip": "10.0.0.2", "hostnames": ["a"]}],
    "terminationGracePeriodSeconds": 30, "activeDeadlineSeconds": 100, "serviceAccountName": "default",
    "priorityClassName": "high", "schedulerName": "default-scheduler", "hostname": "h", "subdomain": "s",
    "imagePullSecrets": [{"name": "pull"}],
}


def rich_bases() -> dict[str, Obj]:
    """The oracle's bases, their pod templates replaced by RICH_POD_SPEC (a TrainJob's in a runtime patch)."""
    found = bases()
    for kind, obj in found.items():
        spec = obj.get("spec")
        if kind == "Pod":
            obj["spec"] = copy.deepcopy(RICH_POD_SPEC)
        elif kind == "Deployment":  # no activeDeadlineSeconds in a ReplicaSet's pods
            spec["template"]["spec"] = {k: v for k, v in copy.deepcopy(RICH_POD_SPEC).items()
                                        if k != "activeDeadlineSeconds"}
        elif kind == "Job":
            spec["template"]["spec"] = {**copy.deepcopy(RICH_POD_SPEC), "restartPolicy": "Never"}
        elif kind == "PyTorchJob":
            for replica in spec["pytorchReplicaSpecs"].values():
                replica["template"]["spec"] = copy.deepcopy(RICH_POD_SPEC)
            spec["elasticPolicy"] = {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 2}
            spec["runPolicy"] = {"cleanPodPolicy": "None", "ttlSecondsAfterFinished": 60}
        elif kind == "TrainJob":
            spec["runtimePatches"] = [{"manager": "kubetrain.dev/kubetrain", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "containers": [{"name": "node", "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}]}],
                    "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
                    "nodeSelector": {"a": "b"}, "tolerations": [{"operator": "Exists"}]}}}}}]}}}}]
    return found


def paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path in `value`, itself included, depth first."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*path, index))


def swapped(obj: Obj, path: tuple[Any, ...], value: Any) -> Obj:
    """A deep copy of `obj` with the value at `path` replaced by `value`."""
    out = copy.deepcopy(obj)
    target: Any = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = copy.deepcopy(value)
    return out
