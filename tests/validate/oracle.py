"""A deterministic mutator of valid manifests, and the real API server's verdict on each mutant.

Each case is a valid base object (a Pod, Deployment, Job, ConfigMap, Secret, Service, PVC, PyTorchJob or
TrainJob) with one or two mutations, each setting one field to a value from a dictionary of edge values
(negative, zero, int32/int64 overflow, upper case, dots, slashes, 63/64/253/254 characters, empty, whitespace,
two sources, dangling references, fractional extended resources). The offline verdict is kubetrain's; the
server's is a `dryRun=All` create (with `fieldValidation=Strict`, as kubectl applies) of the object and of
each pod template wrapped in a Pod (what the operator, the Job controller or JobSet will create); for a
TrainJob, of the Jobs and pods of the JobSet the real Trainer builds from it (trainer_errors).
tests/validate/test_oracle.py runs a fixed seed in CI, benchmarks/bench_validate_oracle.py runs many more.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import yaml

from kubetrain.jobs.podcheck import as_pod
from kubetrain.kube.errors import BadRequest, Forbidden, Invalid, NotFound, TooLarge, api_message
from kubetrain.rules.k8s.templates import pod_templates
from kubetrain.validate import SchemaStore
from kubetrain.validate.engine import validate_document
from kubetrain.yamlsrc import ParsedDoc
from tests.harness.helpers import rest_for
from tests.validate.corpus import MANIFESTS

Obj = dict[str, Any]
Mutation = Callable[[Obj, random.Random], str]  # changes the object, returns a description

STRINGS = ["", " ", "a", "A", "Upper", "a.b", "a/b", "a_b", "-a", "a-", "a" * 63, "a" * 64, "b" * 253, "b" * 254,
           "x y", " lead", "trail ", "a=b", "..a", "1", "..", "example.com/a", "Example.com/a", "a/b/c",
           "my-name", "x" * 16, "x" * 15, "port-1", "1.2.3.4", "a..b", "é"]
INTS = [-1, 0, 1, 100, 101, 65535, 65536, 2**31 - 1, 2**31, -(2**31) - 1, 2**63]
QUANTITIES = ["0.5", "1", "-1", "1.5", "500m", "0", "1e3", "2", 1, 2, "1Gi"]
RESOURCE_NAMES = ["gpu", "nvidia.com/gpu", "cpu", "memory", "example.com/foo", "kubernetes.io/foo", "hugepages-2Mi",
                  "requests.example.com/x", "a/b/c"]
OPERATORS = [None, "", "Equal", "Exists", "In", "Gt", "NotIn", "DoesNotExist", "Lt", "exists"]
EFFECTS = [None, "", "NoSchedule", "NoExecute", "PreferNoSchedule", "Bogus"]
PROFILE_TYPES = ["RuntimeDefault", "Unconfined", "Localhost", "Bogus"]
BIG = "x" * (300 * 1024)


def pick(rng: random.Random, values: list[Any]) -> Any:
    return values[rng.randrange(len(values))]


def maybe(rng: random.Random, values: list[Any]) -> Any:
    return None if rng.random() < 0.3 else pick(rng, values)


def _drop_none(value: Obj) -> Obj:
    return {k: v for k, v in value.items() if v is not None}


# ---- pod spec mutations ------------------------------------------------------------------------------------


def _container(spec: Obj) -> Obj:
    return spec["containers"][0]  # type: ignore[no-any-return]


def m_container_name(spec: Obj, rng: random.Random) -> str:
    _container(spec)["name"] = value = pick(rng, STRINGS)
    return f"containers[0].name={value!r}"


def m_image(spec: Obj, rng: random.Random) -> str:
    value = pick(rng, ["busybox:1.36", " busybox:1.36", "busybox:1.36 ", "busy box:1", "", "BUSYBOX", "\tbusybox"])
    _container(spec)["image"] = value
    return f"image={value!r}"


def m_volume(spec: Obj, rng: random.Random) -> str:
    name = pick(rng, STRINGS)
    volume: Obj = {"name": name, "emptyDir": {}}
    kind = rng.randrange(5)
    if kind == 1:
        volume["hostPath"] = {"path": "/tmp"}
    elif kind == 2:
        volume = {"name": name}
    elif kind == 3:
        volume = {"name": name, "secret": {"secretName": pick(rng, STRINGS), "defaultMode": pick(rng, INTS)}}
    elif kind == 4:
        volume = {"name": name, "configMap": {"name": "cm", "items": [{"key": pick(rng, STRINGS),
                                                                        "path": pick(rng, STRINGS)}]}}
    spec.setdefault("volumes", []).append(volume)
    mount = rng.random() < 0.5
    if mount:
        _container(spec).setdefault("volumeMounts", []).append({"name": name, "mountPath": "/data"})
    return f"volume {json.dumps(volume)[:120]}{' mounted' if mount else ''}"


def m_dangling_mount(spec: Obj, rng: random.Random) -> str:
    name = pick(rng, STRINGS)
    _container(spec).setdefault("volumeMounts", []).append({"name": name, "mountPath": pick(rng, ["/x", "", "x"])})
    return f"volumeMount to {name!r} without a volume"


def m_env(spec: Obj, rng: random.Random) -> str:
    var: Obj = {"name": pick(rng, STRINGS)}
    form = rng.randrange(4)
    if form in (0, 2):
        var["value"] = pick(rng, ["v", ""])
    if form in (1, 2):
        var["valueFrom"] = {pick(rng, ["secretKeyRef", "configMapKeyRef"]): _drop_none(
            {"name": pick(rng, STRINGS), "key": pick(rng, STRINGS)})}
    if form == 3:
        var["valueFrom"] = {"fieldRef": {"fieldPath": "metadata.name"}, "secretKeyRef": {"name": "s", "key": "k"}}
    _container(spec).setdefault("env", []).append(var)
    return f"env {json.dumps(var)[:120]}"


def m_env_from(spec: Obj, rng: random.Random) -> str:
    source = {"prefix": pick(rng, STRINGS), "configMapRef": {"name": pick(rng, STRINGS)}}
    _container(spec)["envFrom"] = [source]
    return f"envFrom {json.dumps(source)[:120]}"


def m_toleration(spec: Obj, rng: random.Random) -> str:
    toleration = _drop_none({"key": maybe(rng, STRINGS), "operator": pick(rng, OPERATORS),
                             "value": maybe(rng, STRINGS), "effect": pick(rng, EFFECTS),
                             "tolerationSeconds": maybe(rng, INTS)})
    spec["tolerations"] = [toleration]
    return f"toleration {json.dumps(toleration)[:120]}"


def m_node_selector(spec: Obj, rng: random.Random) -> str:
    spec["nodeSelector"] = value = {pick(rng, STRINGS): pick(rng, STRINGS)}
    return f"nodeSelector {json.dumps(value)[:120]}"


def m_node_affinity(spec: Obj, rng: random.Random) -> str:
    values = pick(rng, [[], ["a"], ["1"], ["a", "b"], ["x y"]])
    term = {"matchExpressions": [_drop_none({"key": pick(rng, STRINGS), "operator": pick(rng, OPERATORS),
                                             "values": values if rng.random() < 0.8 else None})]}
    terms = [term] if rng.random() < 0.9 else []
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    return f"nodeAffinity {json.dumps(terms)[:120]}"


def m_pod_affinity(spec: Obj, rng: random.Random) -> str:
    term = _drop_none({"topologyKey": maybe(rng, STRINGS), "labelSelector": {"matchExpressions": [_drop_none({
        "key": pick(rng, STRINGS), "operator": pick(rng, OPERATORS), "values": maybe(rng, [[], ["a"], ["A B"]])})]}})
    weighted = {"weight": pick(rng, INTS), "podAffinityTerm": term}
    kind = pick(rng, ["podAffinity", "podAntiAffinity"])
    section = ({"requiredDuringSchedulingIgnoredDuringExecution": [term]} if rng.random() < 0.5 else
               {"preferredDuringSchedulingIgnoredDuringExecution": [weighted]})
    spec["affinity"] = {kind: section}
    return f"{kind} {json.dumps(section)[:120]}"


def m_resources(spec: Obj, rng: random.Random) -> str:
    name, amount = pick(rng, RESOURCE_NAMES), pick(rng, QUANTITIES)
    resources: Obj = {"limits": {name: amount}}
    if rng.random() < 0.5:
        resources["requests"] = {name: pick(rng, QUANTITIES)}
    _container(spec)["resources"] = resources
    return f"resources {json.dumps(resources)}"


def m_security(spec: Obj, rng: random.Random) -> str:
    context: Obj = {pick(rng, ["runAsUser", "runAsGroup", "fsGroup"]): pick(rng, INTS)}
    if rng.random() < 0.5:
        context["seccompProfile"] = _drop_none({"type": pick(rng, PROFILE_TYPES),
                                                "localhostProfile": maybe(rng, ["p.json", ""])})
    if rng.random() < 0.5:
        spec["securityContext"] = context
        return f"pod securityContext {json.dumps(context)}"
    context.pop("fsGroup", None)
    if rng.random() < 0.5:
        context.update(privileged=pick(rng, [True, False]), allowPrivilegeEscalation=pick(rng, [True, False]))
    _container(spec)["securityContext"] = context
    return f"container securityContext {json.dumps(context)}"


def m_probe(spec: Obj, rng: random.Random) -> str:
    handlers = [{}, {"exec": {"command": ["true"]}}, {"httpGet": {"port": pick(rng, INTS + STRINGS)}},
                {"tcpSocket": {"port": 80}, "exec": {"command": ["true"]}}, {"exec": {}}]
    probe: Obj = dict(pick(rng, handlers))
    probe[pick(rng, ["periodSeconds", "successThreshold", "failureThreshold", "initialDelaySeconds",
                     "timeoutSeconds"])] = pick(rng, INTS)
    kind = pick(rng, ["livenessProbe", "readinessProbe", "startupProbe"])
    _container(spec)[kind] = probe
    return f"{kind} {json.dumps(probe)[:120]}"


def m_port(spec: Obj, rng: random.Random) -> str:
    port = _drop_none({"containerPort": pick(rng, INTS), "name": maybe(rng, STRINGS), "hostPort": maybe(rng, INTS),
                       "protocol": maybe(rng, ["TCP", "UDP", "SCTP", "tcp"])})
    _container(spec)["ports"] = [port]
    return f"port {json.dumps(port)[:120]}"


def m_pod_field(spec: Obj, rng: random.Random) -> str:
    key = pick(rng, ["activeDeadlineSeconds", "serviceAccountName", "hostname", "priorityClassName", "dnsPolicy",
                     "terminationGracePeriodSeconds", "subdomain", "schedulerName"])
    ints = key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds")
    value = pick(rng, INTS) if ints else pick(rng, [*STRINGS, "ClusterFirst", "None"])
    # A valid name of a ServiceAccount or PriorityClass that does not exist is refused by admission (cluster
    # state, not validation): only names that exist or are invalid.
    if key == "serviceAccountName" and value not in ("", None):
        value = pick(rng, ["default", "Default", "a_b", "x" * 254])
    if key == "priorityClassName" and value:
        value = pick(rng, ["Upper", "a_b", "x" * 254])
    spec[key] = value
    return f"{key}={value!r}"


def m_topology(spec: Obj, rng: random.Random) -> str:
    constraint = _drop_none({"maxSkew": pick(rng, INTS), "topologyKey": maybe(rng, STRINGS),
                             "whenUnsatisfiable": pick(rng, ["DoNotSchedule", "ScheduleAnyway", "Bogus"])})
    spec["topologySpreadConstraints"] = [constraint]
    return f"topologySpreadConstraint {json.dumps(constraint)[:120]}"


def m_lifecycle(spec: Obj, rng: random.Random) -> str:
    """A sleep hook (its bounds depend on terminationGracePeriodSeconds and the version)."""
    hook = pick(rng, ["preStop", "postStart"])
    _container(spec)["lifecycle"] = {hook: {"sleep": {"seconds": pick(rng, [*INTS, 30, 31])}}}
    if rng.random() < 0.3:
        spec["terminationGracePeriodSeconds"] = pick(rng, [0, 5, 60])
    grace = spec.get("terminationGracePeriodSeconds")
    return f"{hook} {json.dumps(_container(spec)['lifecycle'][hook])}, grace {grace}"


def m_restart(spec: Obj, rng: random.Random) -> str:
    """Container restart policies and rules (ContainerRestartRules, RestartAllContainersOnContainerExits)."""
    container = _container(spec)
    if rng.random() < 0.4:
        container = {"name": "init", "image": "busybox:1.36", "command": ["true"]}
        spec["initContainers"] = [container]
    policy = maybe(rng, ["Always", "OnFailure", "Never", "always"])
    if policy is not None:
        container["restartPolicy"] = policy
    if rng.random() < 0.6:
        rule = _drop_none({"action": pick(rng, ["Restart", "RestartAllContainers", "Bogus"]),
                           "exitCodes": maybe(rng, [{"operator": pick(rng, ["In", "NotIn", "Bogus"]),
                                                     "values": pick(rng, [[1], [], list(range(256))])}])})
        container["restartPolicyRules"] = [rule] * pick(rng, [1, 21])
    fields = {k: container.get(k) for k in ("restartPolicy", "restartPolicyRules")}
    return f"{container['name']} restart {json.dumps(fields)[:120]}"


def m_new_sources(spec: Obj, rng: random.Random) -> str:
    """Sources newer than some supported versions: an image volume, an env var from a file."""
    if rng.random() < 0.5:
        volume = {"name": "model", "image": _drop_none({"reference": maybe(rng, ["busybox:1.36", ""])})}
        spec.setdefault("volumes", []).append(volume)
        return f"volume {json.dumps(volume)}"
    spec.setdefault("volumes", []).append({"name": "envs", "emptyDir": {}})
    var = {"name": "A", "valueFrom": {"fileKeyRef": _drop_none({"path": maybe(rng, ["a.env", "/a.env"]),
                                                                "volumeName": pick(rng, ["envs", "none"]),
                                                                "key": pick(rng, STRINGS)})}}
    _container(spec).setdefault("env", []).append(var)
    return f"env {json.dumps(var)[:120]}"


def m_dns(spec: Obj, rng: random.Random) -> str:
    """dnsPolicy None and dnsConfig: nameservers, searches (RelaxedDNSSearchValidation), options."""
    spec["dnsPolicy"] = pick(rng, ["None", "ClusterFirst"])
    if rng.random() < 0.8:
        spec["dnsConfig"] = _drop_none({
            "nameservers": maybe(rng, [["1.1.1.1"], [], ["1.1.1.1"] * 4, ["010.0.0.1"], ["::1"], ["fe80::1%eth0"],
                                       ["::ffff:1.2.3.4"],
                                       ["1.2.3"], ["a"]]),
            "searches": maybe(rng, [[pick(rng, STRINGS)], ["."], ["_srv.example.com"], ["a.example.com."],
                                    ["a"] * 33, ["x" * 200] * 11]),
            "options": maybe(rng, [[{"name": "ndots", "value": "2"}], [{"value": "2"}]])})
    return f"dnsPolicy {spec['dnsPolicy']}, dnsConfig {json.dumps(spec.get('dnsConfig'))[:120]}"


def m_template_meta(template: Obj, rng: random.Random) -> str:
    meta = template.setdefault("metadata", {})
    if rng.random() < 0.2:
        meta.setdefault("annotations", {})["big"] = BIG
        return "template annotation of 300 KiB"
    key, value = pick(rng, STRINGS), pick(rng, STRINGS)
    section = pick(rng, ["labels", "annotations"])
    meta.setdefault(section, {})[key] = value
    return f"template {section} {key[:40]!r}: {value[:40]!r}"


POD_MUTATIONS: dict[str, list[Callable[[Obj, random.Random], str]]] = {
    "containers": [m_container_name, m_image, m_env, m_env_from, m_probe, m_port, m_lifecycle, m_restart],
    "versioned": [m_new_sources],
    "volumes": [m_volume, m_dangling_mount],
    "scheduling": [m_toleration, m_node_selector, m_node_affinity, m_pod_affinity, m_topology],
    "resources": [m_resources],
    "security": [m_security],
    "podspec": [m_pod_field, m_dns],
}


# ---- object mutations --------------------------------------------------------------------------------------


def m_metadata(obj: Obj, rng: random.Random) -> str:
    meta = obj["metadata"]
    choice = rng.randrange(3)
    if choice == 0:
        meta.setdefault("annotations", {})["big"] = pick(rng, [BIG, "x" * (250 * 1024)])
        return f"annotation of {len(meta['annotations']['big'])} bytes"
    key, value = pick(rng, STRINGS), pick(rng, STRINGS)
    section = "labels" if choice == 1 else "annotations"
    meta.setdefault(section, {})[key] = value
    return f"{section} {key[:40]!r}: {value[:40]!r}"


def m_configmap(obj: Obj, rng: random.Random) -> str:
    key = pick(rng, STRINGS)
    choice = rng.randrange(3)
    if choice == 0:
        obj.setdefault("data", {})[key] = "v"
        return f"data key {key[:40]!r}"
    value = pick(rng, ["aGVsbG8=", "hello!", "aGVsbG8", ""])
    obj.setdefault("binaryData", {})[key if choice == 1 else "app.conf"] = value
    return f"binaryData {(key if choice == 1 else 'app.conf')[:40]!r}: {value!r}"


def m_secret(obj: Obj, rng: random.Random) -> str:
    choice = rng.randrange(3)
    if choice == 0:
        key, value = pick(rng, STRINGS), pick(rng, ["aGVsbG8=", "hello!", "aGVsbG8"])
        obj.setdefault("data", {})[key] = value
        return f"data {key[:40]!r}: {value!r}"
    if choice == 1:
        obj.setdefault("stringData", {})[key := pick(rng, STRINGS)] = "v"
        return f"stringData key {key[:40]!r}"
    obj["type"] = kind = pick(rng, ["kubernetes.io/tls", "kubernetes.io/ssh-auth", "Opaque",
                                    "kubernetes.io/dockerconfigjson"])
    return f"type {kind}"


def m_service(obj: Obj, rng: random.Random) -> str:
    spec = obj["spec"]
    choice = rng.randrange(4)
    if choice == 0:
        port = _drop_none({"port": pick(rng, INTS), "targetPort": maybe(rng, [*INTS, "http", "Upper", "x" * 16]),
                           "name": maybe(rng, STRINGS)})
        spec["ports"] = [port]
        return f"ports {json.dumps(port)[:120]}"
    if choice == 1:
        spec["ports"] = [{"port": 80}, {"port": 81, "name": pick(rng, STRINGS)}]
        return f"two ports, one named {spec['ports'][1]['name'][:40]!r}"
    if choice == 2:
        spec["ports"] = []
        return "no ports"
    spec["selector"] = value = {pick(rng, STRINGS): pick(rng, STRINGS)}
    return f"selector {json.dumps(value)[:120]}"


def m_pvc(obj: Obj, rng: random.Random) -> str:
    spec = obj["spec"]
    choice = rng.randrange(3)
    if choice == 0:
        spec.pop("resources", None)
        return "no storage request"
    if choice == 1:
        spec.setdefault("resources", {}).setdefault("requests", {})["storage"] = value = pick(rng, QUANTITIES)
        return f"storage={value!r}"
    spec["accessModes"] = value = pick(rng, [[], ["ReadWriteOnce"], ["Bogus"], ["ReadWriteOncePod"]])
    return f"accessModes={value!r}"


def m_workload(obj: Obj, rng: random.Random) -> str:
    spec = obj["spec"]
    choice = rng.randrange(3)
    if choice == 0:
        spec["selector"] = value = {"matchLabels": {pick(rng, ["app", "other"]): pick(rng, ["demo", "x"])}}
        return f"selector {json.dumps(value)}"
    if choice == 1:
        spec["replicas"] = value = pick(rng, INTS)
        return f"replicas={value}"
    spec["template"]["spec"]["restartPolicy"] = value = pick(rng, ["Always", "OnFailure", "Never"])
    return f"template restartPolicy={value}"


def m_job(obj: Obj, rng: random.Random) -> str:
    key = pick(rng, ["backoffLimit", "parallelism", "completions", "activeDeadlineSeconds", "ttlSecondsAfterFinished"])
    if rng.random() < 0.3:
        obj["spec"]["template"]["spec"]["restartPolicy"] = value = pick(rng, ["Always", "OnFailure", "Never", None])
        return f"template restartPolicy={value}"
    obj["spec"][key] = value = pick(rng, INTS)
    return f"{key}={value}"


def m_pytorchjob(obj: Obj, rng: random.Random) -> str:
    key = pick(rng, ["replicas", "backoffLimit", "activeDeadlineSeconds"])
    value = pick(rng, INTS)
    if key == "replicas":
        obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = value
    else:
        obj["spec"].setdefault("runPolicy", {})[key] = value
    return f"{key}={value}"


def m_trainjob(obj: Obj, rng: random.Random) -> str:
    trainer = obj["spec"]["trainer"]
    choice = rng.randrange(5)
    if choice == 3:
        key = pick(rng, ["kind", "apiGroup"])
        # not TrainingRuntime: torch-distributed exists only as a ClusterTrainingRuntime, and a missing runtime
        # is cluster state (the webhook looks it up), not a validation rule
        obj["spec"]["runtimeRef"][key] = value = pick(rng, ["ClusterTrainingRuntime", "TrainingRuntimes",
                                                             "ClusterTrainingRuntimes", "trainer.kubeflow.org",
                                                             "kubeflow.org", "", "trainer.kubeflow.org/v1alpha1"])
        return f"runtimeRef.{key}={value!r}"
    if choice == 4:
        manager = pick(rng, ["kubetrain.dev/kubetrain", "kubetrain", "example.com", "Example.com/x", "a.b/c/d",
                             "kubetrain.dev/", "x/y"])
        obj["spec"]["runtimePatches"] = [{"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": pick(rng, ["node", "launcher", "Node"]), "template": {"spec": {"template": {
                "spec": {"containers": [{"name": pick(rng, ["node", "trainer", "Node"]),
                                         "env": [{"name": "A", "value": "1"}]}]}}}}}]}}}}]
        return f"runtimePatches manager={manager!r}"
    if choice == 0:
        trainer["numNodes"] = value = pick(rng, INTS)
        return f"numNodes={value}"
    if choice == 1:
        trainer["env"] = [{"name": pick(rng, STRINGS), "value": "v"}]
        return f"trainer env {trainer['env'][0]['name'][:40]!r}"
    trainer["resourcesPerNode"] = value = {"limits": {pick(rng, RESOURCE_NAMES): pick(rng, QUANTITIES)}}
    return f"resourcesPerNode {json.dumps(value)}"


OBJECT_MUTATIONS: dict[str, list[Callable[[Obj, random.Random], str]]] = {
    "ConfigMap": [m_configmap], "Secret": [m_secret], "Service": [m_service], "PersistentVolumeClaim": [m_pvc],
    "Deployment": [m_workload], "Job": [m_job], "PyTorchJob": [m_pytorchjob], "TrainJob": [m_trainjob],
}


# ---- bases and cases ---------------------------------------------------------------------------------------

POD_SPEC: Obj = {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}]}


def bases() -> dict[str, Obj]:
    meta = {"name": "demo"}
    template = {"metadata": {"labels": {"app": "demo"}}, "spec": copy.deepcopy(POD_SPEC)}
    job_template = copy.deepcopy(template)
    job_template["spec"]["restartPolicy"] = "Never"
    found = {
        "Pod": {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": POD_SPEC},
        "Deployment": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "selector": {"matchLabels": {"app": "demo"}}, "template": template}},
        "Job": {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": job_template}},
        "ConfigMap": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a.txt": "x"}},
        "Secret": {"apiVersion": "v1", "kind": "Secret", "metadata": meta,
                   "data": {"token": base64.b64encode(b"t").decode()}},
        "Service": {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
            "selector": {"app": "demo"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
        "PersistentVolumeClaim": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
        "PyTorchJob": yaml.safe_load((MANIFESTS / "simple.yaml").read_text()),
        "TrainJob": yaml.safe_load((MANIFESTS / "trainjob.yaml").read_text()),
    }
    return copy.deepcopy(found)


@dataclass
class Case:
    kind: str
    family: str
    steps: list[tuple[str, int]]  # (mutation name, its seed): replayable one by one when shrinking
    description: list[str]
    obj: Obj


ALL_POD = [(family, m) for family, ms in POD_MUTATIONS.items() for m in ms]
_BY_NAME: dict[str, tuple[str, Callable[..., str]]] = {
    **{m.__name__: (family, m) for family, m in ALL_POD},
    "m_template_meta": ("metadata", m_template_meta), "m_metadata": ("metadata", m_metadata),
    **{m.__name__: ("objects", m) for ms in OBJECT_MUTATIONS.values() for m in ms}}


def _pod_target(obj: Obj) -> Obj:
    """The pod template a pod mutation changes: a TrainJob's is a runtime patch of the `node` job (the
    Trainer merges it into the runtime's template: trainer_errors judges the result)."""
    if obj["kind"] != "TrainJob":
        return next(t for t in pod_templates(obj) if not t.partial).template  # type: ignore[no-any-return]
    template: Obj = {"spec": {"containers": [{"name": "node"}]}}
    obj["spec"].setdefault("runtimePatches", []).append({"manager": "kubetrain.dev/oracle", "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": template}}}]}}}})
    return template


def build(kind: str, steps: list[tuple[str, int]]) -> tuple[Obj, list[str]]:
    obj = bases()[kind]
    descriptions = []
    for name, seed in steps:
        rng = random.Random(seed)
        _, mutation = _BY_NAME[name]
        if name in {m.__name__ for _, m in ALL_POD} or name == "m_template_meta":
            template = _pod_target(obj)
            target = template if name == "m_template_meta" else template["spec"]
            descriptions.append(mutation(target, rng))
        else:
            descriptions.append(mutation(obj, rng))
    return obj, descriptions


def cases(kind: str, count: int, seed: int) -> Iterator[Case]:
    rng = random.Random(f"{seed}-{kind}")
    has_pods = kind not in ("ConfigMap", "Secret", "Service", "PersistentVolumeClaim")
    names = [m.__name__ for m in OBJECT_MUTATIONS.get(kind, [])] + ["m_metadata"]
    if has_pods:
        names += [m.__name__ for _, m in ALL_POD] * 3 + ["m_template_meta"]
    if kind == "TrainJob":  # its own fields (trainer, runtimeRef, patches' managers) as often as the pod's
        names += [m.__name__ for m in OBJECT_MUTATIONS[kind]] * (len(ALL_POD) * 3)
    for _ in range(count):
        steps = [(pick(rng, names), rng.randrange(2**32)) for _ in range(1 if rng.random() < 0.7 else 2)]
        obj, description = build(kind, steps)
        yield Case(kind, _BY_NAME[steps[0][0]][0], steps, description, obj)


# ---- verdicts ----------------------------------------------------------------------------------------------

PLURALS = {"Pod": "pods", "ConfigMap": "configmaps", "Secret": "secrets", "Service": "services",
           "PersistentVolumeClaim": "persistentvolumeclaims", "Deployment": "deployments", "Job": "jobs",
           "PyTorchJob": "pytorchjobs", "TrainJob": "trainjobs"}


def offline_errors(obj: Obj, store: SchemaStore) -> list[str]:
    return [f"{i.path}: {i.message}" for i in validate_document(ParsedDoc(obj), "case", 1, store)
            if i.severity == "error"]


def server_errors(client: Any, obj: Obj, namespace: str) -> list[str]:
    """The server's rejections of the object and of each of its pod templates as a Pod (empty: accepted)."""
    requests = [copy.deepcopy(obj)]
    requests[0]["metadata"]["namespace"] = namespace
    for template in pod_templates(obj):
        if template.partial or (template.stage is None and obj["kind"] == "Pod"):
            continue
        requests.append(as_pod(obj, template.template))
    found = [message for message in (_dry_run(client, body, namespace) for body in requests) if message]
    if obj["kind"] == "TrainJob" and not found:
        found = trainer_errors(client, obj, namespace, next(SERIAL))
    return found


# kubectl apply's default (--validate=strict): an unknown field is refused, not pruned
DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"
TRAINJOBS = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs"
TRAINER_WAIT = 20.0
SERIAL = itertools.count()


def trainer_errors(client: Any, obj: Obj, namespace: str, serial: int) -> list[str]:
    """What the real Trainer makes of a TrainJob the API server accepts: the TrainJob is created (suspended,
    so nothing runs), the Trainer merges its runtime, resourcesPerNode, env and runtimePatches into a JobSet,
    and each of the JobSet's Jobs and pod templates is created with `dryRun=All` (what JobSet and the Job
    controller will create). A JobSet that never appears is the Trainer's refusal, with its condition."""
    body = copy.deepcopy(obj)
    # unique per case (cases run in parallel), of the same length: the JobSet's pod hostnames grow with it
    name = str(body["metadata"]["name"])
    tag = f"o{serial:x}"
    body["metadata"].update(namespace=namespace, name=(name[:max(len(name) - len(tag), 0)] + tag)
                            if len(name) > len(tag) else tag)
    body["spec"]["suspend"] = True
    rest = rest_for(client)
    created = f"{TRAINJOBS.format(namespace=namespace)}/{body['metadata']['name']}"
    rest.json("POST", TRAINJOBS.format(namespace=namespace), {"fieldValidation": "Strict"}, body)
    try:
        jobset = _wait_for_jobset(rest, namespace, body["metadata"]["name"], created)
        if isinstance(jobset, str):
            return [jobset]
        messages = []
        for replicated in jobset["spec"].get("replicatedJobs", []):
            job_spec = replicated["template"]["spec"]
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{replicated['name']}-dryrun"},
                   "spec": {**job_spec, "suspend": True}}
            messages += [_dry_run(client, job, namespace), _dry_run(client, as_pod(job, job_spec["template"]),
                                                                    namespace)]
        return [m for m in messages if m]
    finally:
        rest.json("DELETE", created, {"propagationPolicy": "Background"})


def _wait_for_jobset(rest: Any, namespace: str, name: str, trainjob: str) -> Obj | str:
    deadline = time.monotonic() + TRAINER_WAIT
    while time.monotonic() < deadline:
        try:
            return rest.json("GET", JOBSETS.format(namespace=namespace, name=name))  # type: ignore[no-any-return]
        except NotFound:
            pass
        conditions = rest.json("GET", trainjob).get("status", {}).get("conditions", [])
        failed = [c for c in conditions if c.get("type") == "Failed" and c.get("status") == "True"]
        if failed:
            return f"Trainer: {failed[0].get('message', '')[:400]}"
        time.sleep(0.2)
    return f"Trainer: no JobSet for TrainJob {name} after {TRAINER_WAIT:.0f} s"


def _dry_run(client: Any, body: Obj, namespace: str) -> str:
    """The server's message for a refused dry-run create ('' when accepted). Raw REST: the kubernetes
    package's typed client checks bodies itself and would refuse some before the server sees them."""
    version = body["apiVersion"]
    base = "/api/v1" if version == "v1" else f"/apis/{version}"
    try:
        rest_for(client).json("POST", f"{base}/namespaces/{namespace}/{PLURALS[body['kind']]}", DRY_RUN, body)
    except (BadRequest, Forbidden, TooLarge, Invalid) as exc:  # Forbidden: a webhook's denial
        return f"{body['kind']}: {api_message(exc)[:400]}"
    return ""


@dataclass
class Outcome:
    case: Case
    offline: list[str]
    server: list[str]

    @property
    def false_green(self) -> bool:
        return not self.offline and bool(self.server)

    @property
    def false_red(self) -> bool:
        return bool(self.offline) and not self.server


def run(all_cases: list[Case], client: Any, namespace: str, store: SchemaStore, workers: int = 8) -> list[Outcome]:
    offline = [offline_errors(c.obj, store) for c in all_cases]
    with ThreadPoolExecutor(workers) as pool:
        server = list(pool.map(lambda c: server_errors(client, c.obj, namespace), all_cases))
    return [Outcome(c, o, s) for c, o, s in zip(all_cases, offline, server, strict=True)]


def shrink(outcome: Outcome, client: Any, namespace: str, store: SchemaStore) -> str:
    """The smallest set of steps (one, when one alone disagrees) that still disagrees, as YAML."""
    case = outcome.case
    for step in case.steps:
        if len(case.steps) == 1:
            break
        obj, description = build(case.kind, [step])
        smaller = Outcome(Case(case.kind, case.family, [step], description, obj), offline_errors(obj, store),
                          server_errors(client, obj, namespace))
        if smaller.false_green == outcome.false_green and smaller.false_red == outcome.false_red:
            return shrink(smaller, client, namespace, store)
    return (f"{case.kind} with {'; '.join(case.description)}\n  offline: {outcome.offline or 'valid'}\n"
            f"  server: {outcome.server or 'accepted'}")
