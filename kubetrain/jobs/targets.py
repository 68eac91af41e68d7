"""The two job kinds kubetrain submits, where their APIs live, and which one `target: auto` means here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubetrain.errors import ClusterError
from kubetrain.kube.errors import CRD_HINT, NotFound, cluster_errors
from kubetrain.kube.objects import meta_of
from kubetrain.kube.rest import Rest


@dataclass(frozen=True)
class Target:
    """A job kind: its API (group/version/plural), how its pods are labelled, where its operator runs."""

    name: str  # spec.target value
    group: str
    version: str
    plural: str
    kind: str
    pod_label: str  # label on every pod of a job, value = the job's name
    operators: tuple[tuple[str, str], ...]  # (namespace, Deployment name) of the usual installs
    operator_name: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def resource(self) -> str:
        """kubectl's name for the resource: pytorchjobs.kubeflow.org."""
        return f"{self.plural}.{self.group}"

    def pod_selector(self, job: str) -> str:
        return f"{self.pod_label}={job}"


PYTORCHJOB = Target(
    "pytorchjob", "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "training.kubeflow.org/job-name",
    (("kubeflow", "training-operator"), ("kubeflow-system", "training-operator")), "Kubeflow training-operator")
TRAINJOB = Target(
    "trainjob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", "jobset.sigs.k8s.io/jobset-name",
    (("kubeflow-system", "kubeflow-trainer-controller-manager"), ("kubeflow", "kubeflow-trainer-controller-manager")),
    "Kubeflow Trainer v2")
# kubetrain's own TrainingJob (kubetrain controller, docs/operator.md): it owns a PyTorchJob or TrainJob and
# is never a submit target itself. Its children's pods carry kubetrain's job label.
TRAININGJOB = Target(
    "trainingjob", "kubetrain.dev", "v1alpha1", "trainingjobs", "TrainingJob", "kubetrain.dev/job",
    (("kubetrain-system", "kubetrain-controller"),), "kubetrain controller")
TARGETS = {t.name: t for t in (PYTORCHJOB, TRAINJOB)}
# When both are installed, auto prefers PyTorchJob: it is what `kubetrain render` produces for auto offline,
# so `render` and `submit` of the same spec agree.
AUTO_ORDER = (PYTORCHJOB, TRAINJOB)
NOT_INSTALLED = f"neither PyTorchJob nor TrainJob is installed in this cluster: {CRD_HINT}"


def served(rest: Rest, target: Target) -> bool:
    """Does the API server serve the target's resource? Uses discovery, which every user may read."""
    return serves(rest, target.group, target.version, target.plural)


def serves(rest: Rest, group: str, version: str, plural: str) -> bool:
    """Is group/version/plural served (discovery; a 404 means the group/version is not)?"""
    try:
        resources = rest.get(f"/apis/{group}/{version}")
    except NotFound:
        return False
    return any(r.get("name") == plural for r in resources.get("resources") or [])


def installed(rest: Rest) -> list[Target]:
    with cluster_errors("discover the training APIs"):
        return [t for t in AUTO_ORDER if served(rest, t)]


def resolve(rest: Rest, wanted: str) -> Target:
    """The Target for spec.target (auto: the first installed of PyTorchJob, TrainJob); errors say what to install."""
    if wanted != "auto":
        return TARGETS[wanted]
    found = installed(rest)
    if not found:
        raise ClusterError(f"target: auto: neither PyTorchJob (kubeflow.org/v1) nor TrainJob "
                           f"(trainer.kubeflow.org/v1alpha1) is installed: {CRD_HINT}")
    return found[0]


def controlling_trainingjob(job: dict[str, Any]) -> str | None:
    """The name of the TrainingJob that controls this PyTorchJob/TrainJob (made by kubetrain controller), if any."""
    ref = trainingjob_ref(job)
    return str(ref.get("name")) if ref else None


def trainingjob_ref(job: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference of the TrainingJob that controls this PyTorchJob/TrainJob, if any (its uid finds
    the TrainingJob's own Events: Hung, HangRestart, Straggler...)."""
    for ref in meta_of(job).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == TRAININGJOB.kind \
                and ref.get("apiVersion") == TRAININGJOB.api_version:
            return dict(ref)
    return None
