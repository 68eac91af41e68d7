"""What the controllers and operators create from an object, for `validate --exact` to dry-run as well.

- every pod template as the Pod it becomes (a Deployment's, a Job's, a PyTorchJob replica's, a JobSet's or
  a training runtime's): pod validation and pod admission (Priority, PodSecurity) run only on pods;
- a PyTorchJob's Services: training-operator v1.9.4 (`pkg/controller.v1/common/service.go`,
  `CreateNewService`, `GetPortsFromJob`) makes one headless Service per replica, named
  `<job>-<replica type>-<index>`, with one port per port *name* of the `pytorch` container, after its
  defaulting (`SetDefaults_PyTorchJob`) added `pytorchjob-port: 23456` when no port has that name — so a
  second port on 23456, or two unnamed ports, make a Service the API server refuses, and the job never runs.

The operators' webhooks do not run on the local server: their create-time rules are kubetrain's port
(kubetrain.validate.operators), plus JobSet v0.12.0's webhook rule on generated names, which the Trainer's
JobSet meets.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubetrain.jobs.podcheck import as_pod
from kubetrain.jobspec import names
from kubetrain.validate import operators
from kubetrain.validate.findings import Finding, get
from kubetrain.validate.k8s.templates import pod_templates
from kubetrain.validate.runtimes import runtime_of
from kubetrain.yamlsrc import PathKey

DEFAULT_CONTAINER, DEFAULT_PORT_NAME, DEFAULT_PORT = "pytorch", "pytorchjob-port", 23456
OPERATOR_WEBHOOK = "the training-operator's webhook (kubetrain's port of its rules) refuses it"
JOBSET_WEBHOOK = "JobSet's webhook would refuse the JobSet the Trainer creates"


@dataclass(frozen=True)
class Derived:
    path: PathKey  # in the document: where the derived object comes from
    body: dict[str, Any]
    stage: str  # what fails if the server refuses it


def derived_objects(obj: dict[str, Any]) -> Iterator[Derived]:
    kind = obj.get("kind")
    if kind == "Pod":
        return
    for template in pod_templates(obj):
        if template.partial or not isinstance(template.template, dict):
            continue
        pod = as_pod(obj, template.template)
        pod["metadata"].pop("namespace", None)
        stage = template.stage or f"the {kind}'s pods would be refused"
        yield Derived(template.path, pod, f"the API server accepts the {kind}, but {stage}")
    if kind == "PyTorchJob":
        yield from pytorchjob_services(obj)


def pytorchjob_services(obj: dict[str, Any]) -> Iterator[Derived]:
    name = get(obj, "metadata", "name")
    replicas = get(obj, "spec", "pytorchReplicaSpecs")
    if not isinstance(name, str) or not isinstance(replicas, dict):
        return
    for replica_type, replica in replicas.items():
        count = replica.get("replicas", 1) if isinstance(replica, dict) else 1
        index = max(count - 1, 0) if isinstance(count, int) and not isinstance(count, bool) else 0
        rtype = str(replica_type).lower()
        labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name":
                  "pytorchjob-controller", "training.kubeflow.org/replica-type": rtype,
                  "training.kubeflow.org/replica-index": str(index)}
        ports = _service_ports(get(replica, "template", "spec", "containers"))
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": f"{name}-{rtype}-{index}", "labels": labels},
                   "spec": {"clusterIP": "None", "selector": labels, "ports": ports}}
        yield Derived(("spec", "pytorchReplicaSpecs", replica_type), service,
                      "the API server accepts the PyTorchJob, but the operator's Service creation would fail")


def _service_ports(containers: Any) -> list[dict[str, Any]]:
    """GetPortsFromJob after setPyTorchDefaultPort: the `pytorch` container's ports by name (a later port of the
    same name replaces an earlier one, as in the operator's map)."""
    if not isinstance(containers, list) or not containers:
        return []
    chosen = next((c for c in containers if isinstance(c, dict) and c.get("name") == DEFAULT_CONTAINER), None)
    if chosen is None:
        return []
    ports: dict[str, Any] = {}
    for port in chosen.get("ports") or [] if isinstance(chosen.get("ports"), list) else []:
        if isinstance(port, dict):
            ports[str(port.get("name") or "")] = port.get("containerPort")
    ports.setdefault(DEFAULT_PORT_NAME, DEFAULT_PORT)
    return [{"name": key, "port": value} for key, value in ports.items()]


def operator_rule_findings(obj: dict[str, Any]) -> Iterator[Finding]:
    """The operators' webhook rules, which a local server without the operators does not run."""
    kind = obj.get("kind")
    if kind == "PyTorchJob":
        for finding in operators.pytorchjob_webhook(obj):
            yield Finding(finding.path, f"{finding.message} ({OPERATOR_WEBHOOK})", finding.severity)
    elif kind == "TrainJob":
        yield from (f for f in operators.trainjob_webhook(obj) if f.severity == "error" and "(the API server "
                    "accepts it" not in f.message)
        yield from jobset_names(obj)


def jobset_names(obj: dict[str, Any]) -> Iterator[Finding]:
    """JobSet v0.12.0's webhook (`validateCreate`): the longest Job name `<jobset>-<job>-<index>` and, for an
    Indexed Job, the longest pod name `<jobset>-<job>-<index>-<pod index>-abcde` are DNS-1035 labels. The
    Trainer names the JobSet after the TrainJob; its runtimes' replicated jobs have one replica each, and the
    node job runs `numNodes` pods."""
    name = get(obj, "metadata", "name")
    runtime = runtime_of(get(obj, "spec", "runtimeRef"))
    if not isinstance(name, str) or runtime is None:
        return
    nodes = get(obj, "spec", "trainer", "numNodes")
    nodes = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0 else 1
    for job in sorted(runtime.jobs):
        pods = nodes if job == "node" else 1
        longest = f"{name}-{job}-0-{pods - 1}-abcde"
        if error := names.dns_label_error(longest, rfc1035=True):
            yield Finding(("metadata", "name"), f"the pod name {longest!r} would be invalid: {error} "
                          f"(the API server accepts the TrainJob, but {JOBSET_WEBHOOK})")
            return
