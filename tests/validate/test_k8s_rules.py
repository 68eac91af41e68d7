"""Kubernetes' own pod and object rules, offline (kubetrain/rules/k8s): each case is reported
at its field, and the valid bases pass. The server's verdict on the same kinds of mutation is checked in
test_oracle.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from kubetrain.fieldpath import join_path
from kubetrain.rules.k8s.check import k8s_findings
from kubetrain.validate import SchemaStore
from kubetrain.validate.engine import validate_sources
from tests.validate import oracle

Obj = dict[str, Any]


def _pod(change: Callable[[Obj], None]) -> Obj:
    pod = oracle.bases()["Pod"]
    change(pod["spec"])
    return pod


def _c(spec: Obj) -> Obj:
    return spec["containers"][0]  # type: ignore[no-any-return]


POD_CASES: list[tuple[str, Callable[[Obj], None], str]] = [
    ("mount-missing-volume", lambda s: _c(s).update(volumeMounts=[{"name": "data", "mountPath": "/d"}]),
     "spec.containers[0].volumeMounts[0].name"),
    ("upper-container-name", lambda s: _c(s).update(name="Main"), "spec.containers[0].name"),
    ("upper-volume-name", lambda s: s.update(volumes=[{"name": "Data", "emptyDir": {}}]), "spec.volumes[0].name"),
    ("two-volume-sources", lambda s: s.update(volumes=[{"name": "d", "emptyDir": {}, "hostPath": {"path": "/x"}}]),
     "spec.volumes[0].emptyDir"),
    ("exists-with-value", lambda s: s.update(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
     "spec.tolerations[0].operator"),
    ("seconds-without-noexecute", lambda s: s.update(tolerations=[{"key": "k", "tolerationSeconds": 5}]),
     "spec.tolerations[0].effect"),
    ("bad-toleration-key", lambda s: s.update(tolerations=[{"key": "a b", "operator": "Exists"}]),
     "spec.tolerations[0].key"),
    ("empty-key-equal", lambda s: s.update(tolerations=[{"operator": "Equal", "value": "v"}]),
     "spec.tolerations[0].operator"),
    ("node-selector-value", lambda s: s.update(nodeSelector={"pool": "a b"}), "spec.nodeSelector.pool"),
    ("affinity-operator", lambda s: s.update(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "k", "operator": "Equals", "values": ["a"]}]}]}}}),
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator"),
    ("unqualified-gpu", lambda s: _c(s).update(resources={"limits": {"gpu": 1}}),
     "spec.containers[0].resources.limits.gpu"),
    ("fractional-gpu", lambda s: _c(s).update(resources={"limits": {"nvidia.com/gpu": "0.5"}}),
     'spec.containers[0].resources.limits["nvidia.com/gpu"]'),
    ("env-name-equals", lambda s: _c(s).update(env=[{"name": "A=B", "value": "1"}]), "spec.containers[0].env[0].name"),
    ("value-and-value-from", lambda s: _c(s).update(env=[{"name": "A", "value": "1", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}}}]), "spec.containers[0].env[0].valueFrom"),
    ("upper-secret-name", lambda s: _c(s).update(env=[{"name": "A", "valueFrom": {"secretKeyRef": {
        "name": "Creds", "key": "k"}}}]), "spec.containers[0].env[0].valueFrom.secretKeyRef.name"),
    ("run-as-user-negative", lambda s: s.update(securityContext={"runAsUser": -1}), "spec.securityContext.runAsUser"),
    ("localhost-seccomp-no-path", lambda s: _c(s).update(securityContext={"seccompProfile": {"type": "Localhost"}}),
     "spec.containers[0].securityContext.seccompProfile.localhostProfile"),
    ("probe-without-handler", lambda s: _c(s).update(livenessProbe={"periodSeconds": 5}),
     "spec.containers[0].livenessProbe"),
    ("port-out-of-range", lambda s: _c(s).update(ports=[{"containerPort": 70000}]),
     "spec.containers[0].ports[0].containerPort"),
    ("port-name-16", lambda s: _c(s).update(ports=[{"containerPort": 80, "name": "x" * 16}]),
     "spec.containers[0].ports[0].name"),
    ("active-deadline-0", lambda s: s.update(activeDeadlineSeconds=0), "spec.activeDeadlineSeconds"),
    ("image-whitespace", lambda s: _c(s).update(image="busybox:1.36 "), "spec.containers[0].image"),
    ("int32-overflow", lambda s: _c(s).update(livenessProbe={"exec": {"command": ["true"]}, "periodSeconds": 2**31}),
     "spec.containers[0].livenessProbe.periodSeconds"),
]


def _paths(obj: Obj) -> set[str]:
    return {join_path(f.path) for f in k8s_findings(obj) if f.severity == "error"}


def test_the_bases_are_valid() -> None:
    for kind, obj in oracle.bases().items():
        assert not _paths(obj), (kind, _paths(obj))


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES])
def test_pod_rules(change: Callable[[Obj], None], field: str) -> None:
    assert field in _paths(_pod(change))


@pytest.mark.parametrize("kind", ["Deployment", "Job", "PyTorchJob"])
def test_pod_rules_apply_to_every_template(kind: str) -> None:
    obj = oracle.bases()[kind]
    template = next(t for t in oracle.pod_templates(obj))
    template.template["spec"]["containers"][0]["name"] = "Main"
    paths = {join_path(f.path): f.message for f in k8s_findings(obj)}
    field = join_path((*template.path, "spec", "containers", 0, "name"))
    assert field in paths
    assert kind != "PyTorchJob" or "the operator's pod creation would fail" in paths[field]


def test_trainjob_runtime_patches_are_checked_as_patches() -> None:
    job = oracle.bases()["TrainJob"]
    patch_spec = {"containers": [{"name": "node", "env": [{"name": "A=B", "value": "1"}],
                                  "volumeMounts": [{"name": "from-runtime", "mountPath": "/d"}]}],
                  "tolerations": [{"operator": "Exists", "value": "v"}]}
    job["spec"]["runtimePatches"] = [{"manager": "kubetrain.dev/kubetrain", "trainingRuntimeSpec": {"template": {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": patch_spec}}}}]}}}}]
    base = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
    # no image is fine in a patch; the env name and toleration are not, nor a mount of a volume that neither
    # the patch nor the torch-distributed runtime has (the real Trainer's pods fail: tests/validate/oracle.py)
    assert _paths(job) == {f"{base}.containers[0].env[0].name", f"{base}.tolerations[0].operator",
                           f"{base}.containers[0].volumeMounts[0].name"}
    job["spec"]["runtimeRef"]["name"] = "torchtune-llama3.2-1b"  # its pods get volumes from the Trainer
    assert _paths(job) == {f"{base}.containers[0].env[0].name", f"{base}.tolerations[0].operator"}


OBJECT_CASES: list[tuple[str, str, Callable[[Obj], None], str]] = [
    ("configmap-slash-key", "ConfigMap", lambda o: o["data"].update({"a/b": "x"}), 'data["a/b"]'),
    ("configmap-dotdot-key", "ConfigMap", lambda o: o["data"].update({"..config": "x"}), 'data["..config"]'),
    ("configmap-overlap", "ConfigMap", lambda o: o.update(binaryData={"a.txt": "eA=="}), 'binaryData["a.txt"]'),
    ("configmap-not-base64", "ConfigMap", lambda o: o.update(binaryData={"b": "hello!"}), "binaryData.b"),
    ("secret-not-base64", "Secret", lambda o: o["data"].update(token="not base64"), "data.token"),
    ("service-port", "Service", lambda o: o["spec"]["ports"][0].update(port=70000), "spec.ports[0].port"),
    ("deployment-selector", "Deployment", lambda o: o["spec"]["selector"]["matchLabels"].update(app="other"),
     "spec.template.metadata.labels"),
    ("pvc-no-storage", "PersistentVolumeClaim", lambda o: o["spec"].pop("resources"),
     "spec.resources.requests.storage"),
    ("namespace-format", "ConfigMap", lambda o: o["metadata"].update(namespace="Team_A"), "metadata.namespace"),
    ("annotations-over-256k", "ConfigMap", lambda o: o["metadata"].update(annotations={"a": "x" * 262144}),
     "metadata.annotations"),
    ("job-always", "Job", lambda o: o["spec"]["template"]["spec"].update(restartPolicy="Always"),
     "spec.template.spec.restartPolicy"),
]


@pytest.mark.parametrize(("kind", "change", "field"), [c[1:] for c in OBJECT_CASES], ids=[c[0] for c in OBJECT_CASES])
def test_object_rules(kind: str, change: Callable[[Obj], None], field: str) -> None:
    obj = oracle.bases()[kind]
    change(obj)
    assert field in _paths(obj)


def test_the_cli_reports_file_line_and_field() -> None:
    pod = _pod(lambda s: _c(s).update(resources={"limits": {"gpu": 1}}))
    text = yaml.safe_dump(copy.deepcopy(pod), sort_keys=False)
    report = validate_sources([("pod.yaml", text)], SchemaStore())
    [issue] = report.errors()
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "gpu" in row)
    assert issue.text().startswith(f"error: pod.yaml:{line}: doc 1 Pod/demo: spec.containers[0].resources.limits.gpu:")


@pytest.mark.parametrize(("key", "value"), [("kind", "ClusterTrainingRuntimes"), ("apiGroup", "kubeflow.org")])
def test_trainjob_runtime_ref_typos(key: str, value: str) -> None:
    from kubetrain.validate.operators import trainjob_webhook

    job = oracle.bases()["TrainJob"]
    assert not list(trainjob_webhook(job))
    job["spec"]["runtimeRef"][key] = value
    assert [join_path(f.path) for f in trainjob_webhook(job)] == [f"spec.runtimeRef.{key}"]


def _patched(manager: str, job: str, container: str, env: bool) -> Obj:
    trainjob = oracle.bases()["TrainJob"]
    node: Obj = {"name": container, **({"env": [{"name": "A", "value": "1"}]} if env else {})}
    trainjob["spec"]["runtimePatches"] = [{"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": job, "template": {"spec": {"template": {"spec": {"containers": [node]}}}}}]}}}}]
    return trainjob


JOB = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"


@pytest.mark.parametrize(("patch", "field"), [
    (("kubetrain.dev/kubetrain", "node", "node", False), None),
    (("kubetrain", "node", "node", False), "spec.runtimePatches[0].manager"),
    (("Kubetrain.dev/x", "node", "node", False), "spec.runtimePatches[0].manager"),
    (("kubetrain.dev/kubetrain", "launcher", "node", False), f"{JOB}.name"),
    (("kubetrain.dev/kubetrain", "node", "trainer", False), f"{JOB}.template.spec.template.spec.containers[0].name"),
    (("kubetrain.dev/kubetrain", "node", "node", True), f"{JOB}.template.spec.template.spec.containers[0].env"),
])
def test_trainer_runtime_patch_rules(patch: tuple[str, str, str, bool], field: str | None) -> None:
    from kubetrain.validate.operators import trainjob_webhook

    found = [join_path(f.path) for f in trainjob_webhook(_patched(*patch))]
    assert found == ([field] if field else [])


@pytest.mark.parametrize("nodes", [0, -1])
def test_trainjob_num_nodes_below_one(nodes: int) -> None:
    from kubetrain.validate.operators import trainjob_webhook

    job = oracle.bases()["TrainJob"]
    job["spec"]["trainer"]["numNodes"] = nodes
    [finding] = trainjob_webhook(job)
    assert join_path(finding.path) == "spec.trainer.numNodes" and "the API server accepts it" in finding.message


def test_env_from_names_are_subdomains_but_may_end_in_a_dash() -> None:
    """validateConfigMapEnvSource: ValidateConfigMapName(name, prefix=true), whose maskTrailingDash lets 'a-' pass;
    the oracle found both sides ('x y' accepted offline, 'cm-' refused offline)."""
    from kubetrain.rules.k8s.containers import env_from

    def problems(name: str) -> list[str]:
        return [f.message for f in env_from([{"configMapRef": {"name": name}}, {"secretRef": {"name": name}}],
                                            ("envFrom",))]

    assert problems("cm-") == [] and problems("cm") == []
    assert len(problems("x y")) == 2 and len(problems("..a")) == 2 and len(problems("-a")) == 2
