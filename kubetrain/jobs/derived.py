"""What the controllers and operators create from an object, for `validate --exact` to dry-run as well.

- every pod template as the Pod it becomes (a Deployment's, a Job's, a PyTorchJob replica's, a JobSet's or
  a training runtime's): pod validation and pod admission (Priority, PodSecurity) run only on pods;
- a PyTorchJob's Services: training-operator v1.9.4 (`pkg/controller.v1/common/service.go`,
  `CreateNewService`, `GetPortsFromJob`) makes one headless Service per replica, named
  `<job>-<replica type>-<index>`, with one port per port *name* of the `pytorch` container, after its
  defaulting (`SetDefaults_PyTorchJob`) added `pytorchjob-port: 23456` when no port has that name — so a
  second port on 23456, or two unnamed ports, make a Service the API server refuses, and the job never runs;
- a TrainJob's JobSet as Trainer v2.3.0 builds it from the TrainJob and its runtime (kubetrain.jobs.trainjobset),
  then the first Job JobSet makes of each replicated job, and that Job's pods.

The operators' webhooks do not run on the local server: their create-time rules are kubetrain's port
(kubetrain.validate.operators), JobSet v0.12.0's rule on generated names included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.jobs.podcheck import as_pod
from kubetrain.jobs.trainjobset import jobset_jobs, trainjob_jobset
from kubetrain.rules.findings import Finding, get
from kubetrain.rules.k8s.templates import pod_templates
from kubetrain.validate import operators
from kubetrain.validate.semantic import pytorchjob_operator_errors

OPERATOR_WEBHOOK = "the training-operator's webhook (kubetrain's port of its rules) refuses it"


@dataclass(frozen=True)
class Derived:
    path: PathKey  # in the document: where the derived object comes from
    body: dict[str, Any]
    stage: str  # what fails if the server refuses it
    mirrors: bool = True  # a pod of a template: its spec and metadata are the template's, field for field
    chained: bool = False  # made from the chained object before it: not sent once one of them is refused
    named_by: PathKey | None = None  # the document's field its name is made of (the JobSet's: the TrainJob's name)


def derived_objects(obj: dict[str, Any], runtime: dict[str, Any] | None = None) -> Iterator[Derived]:
    """What the controllers create from `obj`; a TrainJob's JobSet needs its `runtime`."""
    kind = obj.get("kind")
    if kind == "Pod":
        return
    for template in pod_templates(obj):
        if template.partial or not isinstance(template.template, dict):
            continue
        pod = as_pod(obj, template.template)
        pod["metadata"].pop("namespace", None)
        if kind == "PyTorchJob":
            pod["spec"]["restartPolicy"] = replica_restart_policy(get(obj, *map(str, template.path[:-1]),
                                                                              "restartPolicy"))
        stage = template.stage or f"the {kind}'s pods would be refused"
        yield Derived(template.path, pod, f"the API server accepts the {kind}, but {stage}")
    if kind == "PyTorchJob":
        yield from pytorchjob_services(obj)
    if kind == "TrainJob" and runtime is not None:
        yield from trainer_objects(obj, runtime)


def trainer_objects(trainjob: dict[str, Any], runtime: dict[str, Any]) -> Iterator[Derived]:
    """The Trainer's JobSet, then JobSet's first Job of each replicated job and its pods; a refusal is put
    at the TrainJob's trainer section (else its spec)."""
    path: PathKey = ("spec", "trainer") if isinstance(get(trainjob, "spec", "trainer"), dict) else ("spec",)
    jobset = trainjob_jobset(trainjob, runtime)
    jobset["metadata"].pop("namespace", None)
    jobset["metadata"]["ownerReferences"][0]["uid"] = "00000000-0000-0000-0000-000000000000"
    yield Derived(path, jobset, "the API server accepts the TrainJob, but the Trainer's JobSet would be refused",
                  mirrors=False, chained=True, named_by=("metadata", "name"))
    for _, job in jobset_jobs(jobset):
        name = job["metadata"]["name"]
        yield Derived(path, job, f"the API server accepts the TrainJob, but JobSet's Job {name} would be refused",
                      mirrors=False, chained=True)
        pod = as_pod(job, job["spec"].get("template"))
        yield Derived(path, pod, f"the API server accepts the TrainJob, but the pods of Job {name} would be refused",
                      mirrors=False, chained=True)


def replica_restart_policy(policy: Any) -> Any:
    """The pods' restartPolicy the training-operator sets from the replica's (`setRestartPolicy`: ExitCode is
    Never, anything else is copied; unset, the default OnFailure)."""
    if policy is None:
        return "OnFailure"
    return "Never" if policy == "ExitCode" else policy


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
        ports = operators.service_ports(get(replica, "template", "spec", "containers"))
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": f"{name}-{rtype}-{index}", "labels": labels},
                   "spec": {"clusterIP": "None", "selector": labels, "ports": ports}}
        yield Derived(("spec", "pytorchReplicaSpecs", replica_type), service,
                      "the API server accepts the PyTorchJob, but the operator's Service creation would fail",
                      mirrors=False)


def operator_rule_findings(obj: dict[str, Any]) -> Iterator[Finding]:
    """The operators' webhook rules, which a local server without the operators does not run."""
    kind = obj.get("kind")
    if kind == "PyTorchJob":
        for finding in pytorchjob_operator_errors(obj):
            yield Finding(finding.path, f"{finding.message} ({OPERATOR_WEBHOOK})", finding.severity)
    elif kind == "TrainJob":
        yield from (f for f in operators.trainjob_webhook(obj) if f.severity == "error" and (
            "(the API server accepts it" not in f.message or operators.JOBSET_WEBHOOK in f.message))
