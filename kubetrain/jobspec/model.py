"""The kubetrain job spec (`kubetrain.yaml`): one typed model, the single source of truth."""


from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from kubetrain.jobspec.network import Network
from kubetrain.jobspec.sections import (
    Build,
    ByteQuantity,
    Checkpoint,
    Code,
    Divergence,
    DnsLabel,
    Elastic,
    EnvName,
    Gpus,
    Hang,
    Placement,
    Resources,
    RunPolicy,
    Scheduling,
    SecretEnv,
    Section,
    Security,
    Subdomain,
    Tracking,
    Train,
    Volume,
    _check,
)
from kubetrain.jobspec.sweep import Sweep
from kubetrain.rules import names
from kubetrain.rules.k8s.metadata import annotations_size  # ValidateAnnotationsSize, ported

Target = Literal["pytorchjob", "trainjob", "auto"]


def _text(value: object) -> object:
    # YAML 1.1 reads unquoted yes as true, 3.10 as 3.1 and 010 as 8. Booleans are refused here; numbers
    # become strings, and the loader refuses those whose text changed (spec.load.TEXT_FIELDS).
    if isinstance(value, bool):
        raise ValueError("must be a string")
    return value


Text = Annotated[str, BeforeValidator(_text)]


LabelKey = Annotated[str, AfterValidator(lambda v: _check(names.qualified_name_error(v), v))]
LabelValue = Annotated[str, AfterValidator(lambda v: _check(names.label_value_error(v), v))]
Labels = dict[LabelKey, LabelValue]
Annotations = dict[LabelKey, str]


class Metadata(Section):
    """Name, namespace, labels and annotations of the job (and of every object rendered for it)."""

    name: Annotated[str, AfterValidator(lambda v: _check(names.dns_label_error(v, rfc1035=True), v))]
    """The job's name: an RFC 1035 label (lower-case, starts with a letter). Pod and Service names are
    derived from it, so it must leave room for suffixes such as -worker-7."""
    namespace: DnsLabel | None = None
    """Namespace; default: the kubeconfig context's namespace, else `default`."""
    labels: Labels = Field(default_factory=dict)
    """Labels for the job and its pods."""
    annotations: Annotations = Field(default_factory=dict)
    """Annotations for the job and its pods."""

    @field_validator("annotations")
    @classmethod
    def _annotations_size(cls, value: dict[str, str]) -> dict[str, str]:
        for finding in annotations_size(value, ()):
            raise ValueError(finding.message)
        return value


class JobSpec(Section):
    """What to run, on how many pods and GPUs, and where."""

    target: Target = "pytorchjob"
    """pytorchjob (Kubeflow training-operator v1), trainjob (Kubeflow Trainer v2), or auto (picked from the
    CRDs the cluster has at submit time; renders as pytorchjob offline)."""
    image: Annotated[str, AfterValidator(lambda v: _check(names.image_error(v), v))]
    """Container image with torch and your code (see `kubetrain build`)."""
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None
    """Image pull policy; default Kubernetes' (IfNotPresent unless the tag is :latest)."""
    command: list[Text] | None = None
    """Your program, e.g. [python, -m, train] or [python, train.py]. kubetrain launches it through torchrun.
    Leave it out when using `train` (the Trainer API)."""
    args: list[Text] = Field(default_factory=list)
    """Arguments appended to the command."""
    nodes: Annotated[int, Field(ge=1, le=10000)] = 1
    """Number of pods. With `elastic`, the initial count (between minNodes and maxNodes)."""
    gpusPerNode: Annotated[int, Field(ge=0, le=64)] = 0
    """GPUs per pod; 0 makes a CPU job. Asked for as an nvidia.com/gpu limit unless `gpus.via` says otherwise."""
    gpus: Gpus | None = None
    """How the GPUs are requested: the device plugin (default) or Dynamic Resource Allocation, with a
    DeviceClass and CEL selectors over device attributes (docs/gpu.md, "Dynamic Resource Allocation")."""
    procsPerNode: Annotated[int, Field(ge=1, le=1024)] | None = None
    """Training processes per pod; default gpusPerNode, or 1 for a CPU job."""
    resources: Resources = Field(default_factory=Resources)
    """CPU, memory and scratch disk per pod."""
    shmSize: ByteQuantity | None = None
    """Size of the memory-backed /dev/shm; default a quarter of resources.memory (at least 1Gi), or 2Gi."""
    env: dict[EnvName, Text] = Field(default_factory=dict)
    """Plain environment variables."""
    secretEnv: list[SecretEnv] = Field(default_factory=list)
    """Environment variables from Secrets (secretKeyRef only)."""
    volumes: list[Volume] = Field(default_factory=list)
    """PersistentVolumeClaims to mount."""
    code: Code | None = None
    """Local code shipped as a ConfigMap with the job."""
    network: Network | None = None
    """Inter-node GPU fabric (EFA, InfiniBand, GKE GPUDirect-TCPX/TCPXO): devices, sidecar, NCCL settings."""
    placement: Placement = Field(default_factory=Placement)
    """Node selection: cloud profile, GPU type, extra selectors and tolerations."""
    elastic: Elastic | None = None
    """Elastic (torchrun rendezvous) training; PyTorchJob only."""
    runPolicy: RunPolicy = Field(default_factory=RunPolicy)
    """Backoff, deadlines, clean-up and restart policy."""
    scheduling: Scheduling = Field(default_factory=Scheduling)
    """Kueue queue and PriorityClass."""
    imagePullSecrets: list[Subdomain] = Field(default_factory=list)
    """Secrets for pulling the image from a private registry."""
    serviceAccount: Subdomain | None = None
    """ServiceAccount the pods run as."""
    debug: bool = False
    """Verbose NCCL / torch.distributed preset (NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG=DETAIL, ...)."""
    security: Security = Field(default_factory=Security)
    """Container securityContext settings."""
    terminationGracePeriodSeconds: Annotated[int, Field(ge=0)] = 60
    """Time between SIGTERM and SIGKILL: enough for the runtime's checkpoint on SIGTERM."""
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    """Checkpoint settings used by the kubetrain runtime."""
    hang: Hang = Field(default_factory=Hang)
    """Hang and straggler detection: threshold, and what `kubetrain run` does about a hung job."""
    divergence: Divergence = Field(default_factory=Divergence)
    """What a NaN or infinite loss does: stop (default), skip the step, or continue (docs/runtime.md)."""
    archive: Text | None = None
    """Where every replica's log (with rank 0's metrics lines) is kept while the job runs, so `kubetrain logs`
    and `kubetrain metrics` still work when the pods are gone: a directory (a volume's mountPath) or an
    fsspec URL (s3://bucket/prefix with the `s3` extra). `kubetrain run` writes it locally."""
    trainingRuntime: Subdomain = "torch-distributed"
    """The ClusterTrainingRuntime a TrainJob (target trainjob) runs on."""
    tracking: Tracking | None = None
    """Experiment tracking: one MLflow / Weights & Biases / TensorBoard run per job, across restarts."""
    train: Train | None = None
    """Trainer API: model/dataset/loss/optimizer factories, run by kubetrain.runtime."""
    build: Build | None = None
    """How `kubetrain build` builds the image."""

    @model_validator(mode="before")
    @classmethod
    def _gpu_count(cls, data: Any) -> Any:
        # gpus.count and gpusPerNode are one number: whichever is written fills the other (checks.py refuses
        # two different values, at gpus.count's line).
        if isinstance(data, dict) and isinstance(data.get("gpus"), dict) and "gpusPerNode" not in data:
            count = data["gpus"].get("count")
            if isinstance(count, int) and not isinstance(count, bool):
                return {**data, "gpusPerNode": count}
        return data

    @property
    def gpu_via(self) -> str:
        """plugin, dra or auto (before submit resolves auto)."""
        return self.gpus.via if self.gpus and self.gpusPerNode else "plugin"

    @property
    def procs_per_node(self) -> int:
        """Training processes per pod, after defaulting."""
        return self.procsPerNode or self.gpusPerNode or 1


class TrainingJob(Section):
    """A kubetrain job: `kubetrain.yaml`."""

    apiVersion: Literal["kubetrain.dev/v1alpha1"]
    """Always kubetrain.dev/v1alpha1."""
    kind: Literal["TrainingJob"]
    """Always TrainingJob."""
    metadata: Metadata
    """Name, namespace, labels and annotations."""
    spec: JobSpec
    """What to run and where."""
    sweep: Sweep | None = None
    """A hyperparameter sweep over this job (`kubetrain sweep run`); `run`, `render` and `submit` leave it out
    and run the spec as written (docs/sweeps.md)."""

