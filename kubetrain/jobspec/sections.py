"""The parts of a job spec. Every field documents itself; `docs/spec.md` is generated from these."""


import posixpath
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from kubetrain.objectstore import OBJECT_STORE_BACKENDS
from kubetrain.rules import names
from kubetrain.rules.k8s.scheduling import tolerations  # Kubernetes' ValidateTolerations, ported
from kubetrain.rules.quantity import is_quantity, parse_quantity

INT32_MAX = 2**31 - 1  # Kubernetes' int32 fields (and the uid range IsValidUserID allows)


class Section(BaseModel):
    """Base of every spec model: camelCase keys, unknown keys are errors, immutable once loaded."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True,
        validate_default=True, coerce_numbers_to_str=True,
        allow_inf_nan=False,  # JSON has no Infinity or NaN: `lr: .inf` would render as invalid JSON
        defer_build=True,
    )
    # Field descriptions are the attribute docstrings, read on first need (kubetrain/jobspec/fielddocs.py), not
    # by pydantic's use_attribute_docstrings at class creation, which was ~20 % of render's start-up.

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # field docs only when a schema is asked for (render's start-up)
        from kubetrain.jobspec.fielddocs import document

        document(cls)
        return super().model_json_schema(*args, **kwargs)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads True as 1; in YAML 1.1 `nodes: yes` is True, so it would mean 1 node.
        if isinstance(value, bool) and info.field_name and _numeric_only(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"must be a number, not the boolean {str(value).lower()}")
        return value


def _numeric_only(annotation: Any) -> bool:
    """True when a field takes int/float but never bool (through Optional and Annotated)."""
    leaves: set[Any] = set()
    stack = [annotation]
    while stack:
        candidate = stack.pop()
        if typing.get_origin(candidate) is Annotated:
            stack.append(typing.get_args(candidate)[0])
        elif typing.get_args(candidate) and typing.get_origin(candidate) in (typing.Union, types.UnionType):
            stack.extend(typing.get_args(candidate))
        else:
            leaves.add(candidate)
    leaves.discard(type(None))
    return bool(leaves) and leaves <= {int, float}


def _check(error: str | None, value: str) -> str:
    if error:
        raise ValueError(error)
    return value


def _quantity(value: str) -> str:
    if not is_quantity(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. '8', '500m', '32Gi')")
    if value.startswith("-"):
        raise ValueError(f"{value!r} must not be negative")
    return value


def _bytes(value: str) -> str:
    """Memory and disk sizes: whole bytes. The apiserver accepts '500m' (half a byte) and rounds it up to 1."""
    amount = parse_quantity(value)
    if amount != amount.to_integral_value():  # not `% 1`: that raises DivisionImpossible above 28 digits
        if value.endswith("m"):
            raise ValueError(f"{value!r} is a fraction of a byte ('m' means milli); did you mean '{value}i'?")
        raise ValueError(f"{value!r} is a fraction of a byte; use whole bytes or a unit such as Mi or Gi")
    return value


def _abs_path(value: str) -> str:
    if not value.startswith("/") or ":" in value or ".." in value.split("/"):
        raise ValueError(f"{value!r} must be an absolute path without ':' or '..'")
    return posixpath.normpath(value)


def _module_ref(value: str) -> str:
    if not names.MODULE_REF.fullmatch(value):
        raise ValueError(f"{value!r} must be a 'package.module:function' reference")
    return value


DnsLabel = Annotated[str, AfterValidator(lambda v: _check(names.dns_label_error(v), v))]
Subdomain = Annotated[str, AfterValidator(lambda v: _check(names.subdomain_error(v), v))]
Quantity = Annotated[str, AfterValidator(_quantity)]
ByteQuantity = Annotated[str, AfterValidator(_quantity), AfterValidator(_bytes)]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
EnvName = Annotated[str, Field(pattern=names.ENV_NAME.pattern)]
ModuleRef = Annotated[str, AfterValidator(_module_ref)]


class Resources(Section):
    """CPU and memory per pod (per node). GPUs are set with `gpusPerNode` (and `gpus`)."""

    cpu: Quantity | None = None
    """CPU cores requested per pod, e.g. "8" or "7500m". Not set as a limit, to avoid CFS throttling."""
    memory: ByteQuantity | None = None
    """Memory per pod for your processes, e.g. "32Gi". The limit is this plus `shmSize` (tmpfs pages count
    against the container's memory cgroup)."""
    ephemeralStorage: ByteQuantity | None = None
    """Local scratch disk per pod, e.g. "100Gi"."""
    guaranteed: bool = False
    """Guaranteed QoS: CPU and memory limits equal their requests (needs `cpu` and `memory`), so the kubelet's
    static CPU manager can pin whole cores. Requests then include the /dev/shm size."""


class SecretEnv(Section):
    """An environment variable read from a Kubernetes Secret. Values never appear in a manifest."""

    name: EnvName
    """The variable's name inside the container, e.g. HF_TOKEN."""
    secret: Subdomain
    """The Secret's name (in the job's namespace)."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """The key inside the Secret."""
    optional: bool = False
    """Start the pod even if the Secret or key is missing."""


class Volume(Section):
    """A PersistentVolumeClaim mounted into every pod (datasets, checkpoints)."""

    name: DnsLabel
    """The volume's name in the pod spec."""
    claim: Subdomain
    """The PersistentVolumeClaim's name. Locally (`kubetrain run`) see `localPath`."""
    mountPath: AbsPath
    """Where the volume appears in the container."""
    readOnly: bool = False
    """Mount read-only."""
    localPath: str | None = None
    """For `kubetrain run`: the local directory standing in for the claim (default ./.kubetrain/volumes/<name>)."""


class Code(Section):
    """Local code shipped with the job as a ConfigMap, so a code edit needs no image rebuild."""

    path: Annotated[str, Field(min_length=1)] = "."
    """Directory with the code, relative to the spec file. Must fit in a ConfigMap (1 MiB)."""
    mountPath: AbsPath = "/workspace"
    """Where the code appears in the container; it is also the working directory."""
    exclude: list[str] = Field(default_factory=list)
    """Extra patterns to leave out (gitignore syntax), applied after kubetrain's defaults (`.git`, `__pycache__`,
    `venv`, `checkpoints`, `wandb`, ...), `.gitignore`, `.dockerignore` and `.kubetrainignore`: the rule the
    image build context follows too (docs/images.md). Kubetrain spec files are never code."""
    include: list[str] = Field(default_factory=list)
    """Patterns to ship even though a rule above leaves them out, e.g. `certs/ca.crt`. A file that looks like a
    secret (`.env*`, private keys, cloud credentials) is refused unless named here or re-included with `!` in
    `.kubetrainignore`."""


class Toleration(Section):
    """A pod toleration, as in the Kubernetes API."""

    key: str | None = None
    """The taint key to tolerate; empty with operator Exists means every taint."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """Exists or Equal."""
    value: str | None = None
    """The taint value (with operator Equal)."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """The taint effect to tolerate; empty means all effects."""
    tolerationSeconds: int | None = None
    """For NoExecute: how long the pod stays bound after the taint appears."""

    @model_validator(mode="after")
    def _as_kubernetes_checks_it(self) -> "Toleration":
        problems = [f"{f.path[-1]}: {f.message}" for f in tolerations([self.model_dump(exclude_none=True)], ())]
        if problems:
            raise ValueError("; ".join(problems))
        return self


Cloud = Literal["none", "generic", "gke", "eks", "eks-karpenter", "aks", "kind", "auto"]


class Placement(Section):
    """Where GPU pods may run. A cloud profile adds its node labels and tolerations; yours win."""

    cloud: Cloud = "none"
    """Cloud profile: gke, eks (Auto Mode), eks-karpenter, aks, kind, generic (GPU Feature Discovery labels),
    none, or auto (resolved at submit time from the cluster's node labels)."""
    gpuType: str | None = None
    """Accelerator name in the profile's vocabulary, e.g. nvidia-l4 (gke), l4 (eks), NVIDIA-H100-80GB-HBM3 (generic)."""
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    """Extra node labels the pods require; these override the profile's labels key by key."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Extra tolerations, added to the profile's."""

    @model_validator(mode="after")
    def _check_labels(self) -> "Placement":
        for key, value in self.nodeSelector.items():
            _check(names.qualified_name_error(key) or names.label_value_error(value), key)
        return self


GpuVia = Literal["plugin", "dra", "auto"]
DEFAULT_DEVICE_CLASS = "gpu.nvidia.com"  # the DeviceClass NVIDIA's DRA driver installs


def _cel_selector(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a CEL expression over `device`, e.g. "
                         "device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\"")
    return value


class Gpus(Section):
    """How the pods ask for their GPUs: the device plugin's `nvidia.com/gpu` limit, or Dynamic Resource
    Allocation (resource.k8s.io/v1 ResourceClaims). How many is `gpusPerNode` (or `count` here)."""

    via: GpuVia = "plugin"
    """plugin: an nvidia.com/gpu limit (the NVIDIA device plugin). dra: a ResourceClaimTemplate per replica
    type, claimed by each pod (Kubernetes >= 1.34 with a DRA driver). auto: dra when the cluster has the
    DeviceClass `deviceClass`, else plugin, decided by `kubetrain submit`; offline (`render`) it is plugin."""
    count: Annotated[int, Field(ge=1, le=64)] | None = None
    """GPUs per pod: the same number as `gpusPerNode` (write either; both must agree)."""
    deviceClass: Subdomain = DEFAULT_DEVICE_CLASS
    """The DeviceClass the claims request (with `dra`): gpu.nvidia.com for NVIDIA's DRA driver."""
    selectors: list[Annotated[str, AfterValidator(_cel_selector)]] = Field(default_factory=list)
    """CEL expressions every claimed device must satisfy (with `dra`), e.g.
    `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0`; rendered as the request's
    `selectors: [{cel: {expression: ...}}]`."""


class Elastic(Section):
    """Elastic training (torchrun rendezvous): the job runs with between minNodes and maxNodes pods."""

    minNodes: Annotated[int, Field(ge=1)] = 1
    """Fewest pods the job trains with."""
    maxNodes: Annotated[int, Field(ge=1)]
    """Most pods the job trains with."""
    maxRestarts: Annotated[int, Field(ge=0, le=INT32_MAX)] = 3
    """How often torchrun restarts the worker group after a failure or membership change."""

    @model_validator(mode="after")
    def _min_le_max(self) -> "Elastic":
        if self.minNodes > self.maxNodes:
            raise ValueError(f"minNodes ({self.minNodes}) must be <= maxNodes ({self.maxNodes})")
        return self


class RunPolicy(Section):
    """How the operator runs the job (PyTorchJob spec.runPolicy; TrainJob uses what it supports)."""

    backoffLimit: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = 10
    """Container restarts, summed over the job's running pods, at which the job is marked Failed. One failed
    process costs about nodes + 1 restarts (every node's torchrun fails with it), so 10 survives ~3 failures
    of a 2-node job; raise it for larger jobs."""
    activeDeadlineSeconds: Annotated[int, Field(ge=1)] | None = None
    """Wall-clock limit for the whole job."""
    ttlSecondsAfterFinished: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = 86400
    """Delete the finished job (and its pods) after this many seconds."""
    cleanPodPolicy: Literal["None", "Running", "All"] = "None"
    """Which pods to delete when the job finishes: None keeps logs around."""
    restartPolicy: Literal["OnFailure", "Never", "ExitCode", "Always"] = "OnFailure"
    """Replica restart policy. ExitCode restarts on retryable exit codes (128+) only."""


class Scheduling(Section):
    """Queueing and priority."""

    queue: Annotated[str, AfterValidator(lambda v: _check(names.label_value_error(v), v))] | None = None
    """Kueue LocalQueue name (the kueue.x-k8s.io/queue-name label)."""
    priorityClass: Subdomain | None = None
    """PriorityClass name for the pods."""


class Security(Section):
    """The container's securityContext. Defaults are restrictive: no privilege escalation, no capabilities,
    seccomp RuntimeDefault."""

    runAsNonRoot: bool | None = None
    """Require a non-root user. Default: true for images kubetrain builds (uid 1000), false otherwise, since
    many CUDA base images run as root."""
    runAsUser: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    """The uid to run as."""
    readOnlyRootFilesystem: bool = False
    """Mount the image's filesystem read-only."""


def _checkpoint_dir(value: str | None) -> str | None:
    scheme, sep, rest = (value or "").partition("://")
    if not sep:
        return value
    if scheme not in OBJECT_STORE_BACKENDS:
        raise ValueError(f"{scheme}:// is not a supported store; use a path or one of "
                         + ", ".join(f"{name}://" for name in OBJECT_STORE_BACKENDS))
    if not rest.split("/", 1)[0]:
        raise ValueError(f"{value!r} names no bucket: use {scheme}://BUCKET/PREFIX")
    return value


class Checkpoint(Section):
    """Checkpointing for the kubetrain runtime (the Trainer API, and scripts that use kubetrain.runtime)."""

    dir: Annotated[str | None, AfterValidator(_checkpoint_dir)] = None
    """Where checkpoints go: a directory, typically a volume's mountPath, or an object store URL
    (s3://BUCKET/PREFIX, gs://, az://; needs `kubetrain[s3]`, `[gcs]` or `[azure]` in the image). Unset
    disables checkpointing."""
    everySteps: Annotated[int, Field(ge=1)] | None = None
    """Write a checkpoint every N optimizer steps (besides every epoch end and on SIGTERM)."""
    keep: Annotated[int, Field(ge=1)] = 3
    """Keep the newest K complete checkpoints."""
    resume: bool = True
    """On start, resume from the newest complete checkpoint."""
    sigtermTimeoutSeconds: Annotated[int, Field(ge=1)] = 25
    """Time allowed for the checkpoint written on SIGTERM (must be below terminationGracePeriodSeconds)."""
    ephemeral: bool = False
    """A scratch run: allow a `dir` on no volume, whose checkpoints die with the pod (a restarted pod starts
    over). Without it such a `dir` is refused; `kubetrain run` maps it to a fresh directory per run."""


class Hang(Section):
    """Hang and straggler detection from the runtime's progress signal (docs/hangs.md)."""

    timeoutSeconds: Annotated[int, Field(ge=1)] = 300
    """A job is hung when no rank finished a step for the larger of this and stepFactor x the p99 of the
    recent step times, stalls left out (a stall: a step above that threshold)."""
    stepFactor: Annotated[float, Field(ge=1)] = 10.0
    """k in k x p99 step time (the adaptive part of the threshold), and in k x the longest recent eval or
    checkpoint."""
    phaseTimeoutSeconds: Annotated[int, Field(ge=1)] = 1800
    """The threshold while a rank starts up (first step, resume), and during its first eval or checkpoint.
    Later runs of a phase get the larger of timeoutSeconds and stepFactor x the longest recent run of it,
    stalls left out."""
    policy: Literal["observe", "fail", "restart"] = "observe"
    """What `kubetrain run` does with a hung job after reporting it with every rank's stack: observe (keep
    waiting), fail (stop the job, exit 1), restart (stop it and start again from the last checkpoint)."""
    maxRestarts: Annotated[int, Field(ge=0)] = 2
    """With policy restart: restarts allowed before the job fails."""
    stragglerFactor: Annotated[float, Field(gt=1)] = 1.5
    """A rank straggles when its own time per step (the wall time outside the collectives, on average)
    stays above this times the median of the other ranks. A rank running at half speed is 2x."""


class Divergence(Section):
    """What happens when the training loss (or held-out loss) becomes NaN or infinite (docs/runtime.md)."""

    policy: Literal["stop", "skip", "continue"] = "stop"
    """stop: end the run at the first non-finite step, before anything after it is logged, evaluated or saved,
    with exit code 65 and one line `diverged at step N: loss nan`; the last good checkpoint is kept for a
    resume.
    skip (Trainer API): drop that step's update and go on, up to maxSkippedSteps in a row, then stop.
    continue: train to the end regardless (the run still ends as diverged, exit 65). With spec.command,
    `kubetrain run` stops the job on the first non-finite metrics value (stop) or lets it finish (skip,
    continue). Checkpoints of non-finite parameters are never written under any policy."""
    maxSkippedSteps: Annotated[int, Field(ge=1)] = 10
    """With policy skip: non-finite steps in a row that are skipped; one more stops the run as diverged."""


class DDP(Section):
    """DistributedDataParallel options."""

    findUnusedParameters: bool = False
    """Allow parameters that get no gradient in a step (costs an extra graph traversal)."""
    staticGraph: bool = False
    """Promise the graph is the same every step (enables more optimisations)."""
    gradientAsBucketView: bool = True
    """Gradients alias the allreduce buckets (saves memory)."""
    bucketCapMb: Annotated[float, Field(gt=0)] = 25.0
    """Allreduce bucket size in MiB."""


class FSDP(Section):
    """FSDP2 (`torch.distributed.fsdp.fully_shard`) options, used with `strategy: fsdp`."""

    wrapClasses: list[str] = Field(default_factory=list)
    """Module class names to shard as units, e.g. [TransformerBlock]. Empty: each top-level child module with
    parameters is one unit. The root module is always sharded last."""
    reshardAfterForward: bool = True
    """Free the gathered parameters after forward (ZeRO-3); false keeps them until backward (ZeRO-2-like,
    more memory, fewer all-gathers)."""
    cpuOffload: bool = False
    """Keep sharded parameters, gradients and optimizer state in CPU memory (CPUOffloadPolicy)."""
    metaInit: bool = False
    """Build the model on the `meta` device, shard it, then allocate and initialise only each rank's shards
    (the model's `init_weights()`, else every module's `reset_parameters()`): no rank ever holds the whole
    model, so it may be larger than one GPU. Initial weights then depend on the number of ranks."""
    asyncCheckpoint: bool = False
    """Write sharded checkpoints in the background (torch.distributed.checkpoint.async_save); a checkpoint
    is published when it is complete, at the latest before the next one, at the end, or on SIGTERM."""


class Profile(Section):
    """torch.profiler for the Trainer: traces TensorBoard and Perfetto open, plus a per-cycle summary."""

    dir: str
    """Output directory, normally on a volume (e.g. /ckpt/profile); rank R writes under rank-R/."""
    wait: Annotated[int, Field(ge=0)] = 1
    """Optimizer steps skipped at the start of each cycle."""
    warmup: Annotated[int, Field(ge=0)] = 1
    """Steps profiled but discarded (profiler start-up overhead)."""
    active: Annotated[int, Field(ge=1)] = 3
    """Steps recorded per cycle."""
    repeat: Annotated[int, Field(ge=0)] = 1
    """Cycles; 0 repeats until training ends."""
    ranks: list[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [0])
    """Global ranks that profile."""


class Train(Section):
    """The kubetrain Trainer API: name factories as 'module:function' and kubetrain runs the loop."""

    model: ModuleRef
    """Returns a torch.nn.Module."""
    dataset: ModuleRef
    """Returns a training Dataset, or a (train, eval) pair."""
    loss: ModuleRef | None = None
    """Returns a loss module or function (default: torch.nn.CrossEntropyLoss)."""
    optimizer: ModuleRef | None = None
    """Called with (parameters, lr); default torch.optim.AdamW."""
    scheduler: ModuleRef | None = None
    """Called with (optimizer, total_steps); stepped once per optimizer step."""
    epochs: Annotated[int, Field(ge=1)] = 1
    """Passes over the training data."""
    batchSize: Annotated[int, Field(ge=1)] = 32
    """Samples per process per micro-step."""
    lr: Annotated[float, Field(gt=0)] = 1e-3
    """Learning rate given to the optimizer factory."""
    seed: int = 0
    """Seed for torch, numpy and python RNGs (offset by rank where it must differ)."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Mixed precision: bf16 autocast, or fp16 autocast with a GradScaler."""
    gradAccumSteps: Annotated[int, Field(ge=1)] = 1
    """Micro-steps per optimizer step (no_sync on all but the last)."""
    gradClip: Annotated[float, Field(gt=0)] | None = None
    """Clip the global gradient norm to this value."""
    compile: bool = False
    """Wrap the model with torch.compile."""
    syncBatchNorm: bool = False
    """Convert BatchNorm layers to SyncBatchNorm."""
    activationCheckpointing: bool = False
    """Recompute activations of top-level child modules in backward to save memory."""
    numWorkers: Annotated[int, Field(ge=0)] = 0
    """DataLoader worker processes per rank."""
    logEvery: Annotated[int, Field(ge=1)] = 10
    """Print a metrics line every N optimizer steps."""
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    """Process-group backend: nccl with CUDA, gloo without."""
    timeoutSeconds: Annotated[int, Field(ge=1)] = 1800
    """Collective operation timeout. Unset, rendered pods get max(hang.timeoutSeconds,
    hang.phaseTimeoutSeconds) + 60 s (docs/hangs.md)."""
    ddp: DDP = Field(default_factory=DDP)
    """DDP wrapper options."""
    strategy: Literal["ddp", "fsdp", "dp"] = "ddp"
    """ddp: DistributedDataParallel (recommended). fsdp: FSDP2, parameters, gradients and optimizer state
    sharded across ranks, sharded checkpoints (for models that do not fit one GPU). dp: legacy
    single-process DataParallel over the node's GPUs (one process per node; prefer ddp)."""
    fsdp: FSDP = Field(default_factory=FSDP)
    """FSDP2 options (strategy: fsdp)."""
    profile: Profile | None = None
    """Profile some training steps with torch.profiler (off when unset)."""


class Build(Section):
    """How `kubetrain build` makes the image (context, Dockerfile, build args, repository)."""

    context: str = "."
    """Build context directory, relative to the spec file. `.dockerignore` is respected."""
    dockerfile: str | None = None
    """Dockerfile path relative to the context; default: kubetrain's own (images/Dockerfile)."""
    repository: str | None = None
    """Image repository to tag and push, e.g. ghcr.io/acme/digits. Default: the spec image without its tag."""
    baseImage: str | None = None
    """Base image for kubetrain's Dockerfile (default docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime)."""
    variant: Literal["cuda", "cpu"] = "cuda"
    """cuda for GPU clusters, cpu for laptops and CI smoke runs."""
    buildArgs: dict[str, str] = Field(default_factory=dict)
    """Extra --build-arg values."""
    requirements: str | None = None
    """A requirements file (relative to the context) installed before your code is copied; default
    requirements.txt when the context has one. Used by kubetrain's own Dockerfile."""
    platform: Annotated[str, Field(pattern=r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")] | None = None
    """Target platform for the builder, e.g. linux/amd64 (GPU nodes are usually amd64 even when your laptop
    is arm64). Default: the builder's own platform."""


def _tracking_uri(value: str) -> str:
    scheme, sep, rest = value.partition("://")
    if value.startswith("/") and ":" not in value:
        return value  # a local file store
    if not sep or not scheme or not rest or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a tracking URI; use http://HOST:PORT, https://..., databricks, or "
                         "an absolute path")
    return value


def _tracking_dir(value: str) -> str:
    if "://" in value:
        return _checkpoint_dir(value) or value
    return _abs_path(value)


def _wandb_name(value: str) -> str:
    # W&B refuses these characters in project, entity and group names, and names over 128 characters
    if not 1 <= len(value) <= 128 or any(c in "/\\#?%:" or c.isspace() for c in value):
        raise ValueError(f"{value!r} must be 1-128 characters without / \\ # ? % : or spaces")
    return value


WandbName = Annotated[str, AfterValidator(_wandb_name)]


class SecretKeyRef(Section):
    """A key of a Kubernetes Secret in the job's namespace: a reference, never the value."""

    name: Subdomain
    """The Secret's name."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """The key inside the Secret."""


class MLflowTracking(Section):
    """One MLflow run per job (docs/tracking.md)."""

    trackingUri: Annotated[str, AfterValidator(_tracking_uri)]
    """The tracking server, e.g. http://mlflow.mlflow:5000 (MLFLOW_TRACKING_URI)."""
    experiment: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    """The experiment the run goes to (created if missing); default: the job's name."""


class WandbTracking(Section):
    """One Weights & Biases run per job (docs/tracking.md)."""

    project: WandbName
    """The W&B project (WANDB_PROJECT)."""
    entity: WandbName | None = None
    """The team or user that owns the project (WANDB_ENTITY); default: the API key's default entity."""
    group: WandbName | None = None
    """Groups runs in the UI (WANDB_RUN_GROUP); default: the job's name."""
    apiKeySecret: SecretKeyRef | None = None
    """The Secret key holding the API key, given to the pods as WANDB_API_KEY through a secretKeyRef (never a
    value in a manifest). Unset: the pods get no key (offline mode, or a key baked into the environment)."""


class TensorBoardTracking(Section):
    """TensorBoard event files (docs/tracking.md)."""

    logDir: Annotated[str, AfterValidator(_tracking_dir)]
    """Where the event files go: a volume's mountPath (e.g. /ckpt/tb) or an object store URL (s3://...)."""


class Tracking(Section):
    """Experiment tracking: every job is one run in MLflow, Weights & Biases and/or TensorBoard, across
    restarts and resumes (docs/tracking.md)."""

    mlflow: MLflowTracking | None = None
    """Log to an MLflow tracking server (the runtime needs `kubetrain[mlflow]` in the image)."""
    wandb: WandbTracking | None = None
    """Log to Weights & Biases (the runtime needs `kubetrain[wandb]` in the image); the pods also get the
    variables `wandb.init()` reads (project, entity, group, the job's run ID with resume allowed, the API key
    from a Secret), so a plain script's run is the job's run."""
    tensorboard: TensorBoardTracking | None = None
    """Write TensorBoard event files (the runtime needs `kubetrain[tensorboard]` in the image)."""
    params: dict[str, str] = Field(default_factory=dict)
    """Your hyperparameters (values are text: quote booleans), logged as the run's parameters besides the
    spec's training fields."""
    bufferPoints: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """Points kept while a tracker is unreachable; training never waits for a tracker, and the points beyond
    this are dropped (and counted in one line at the end)."""

    @model_validator(mode="after")
    def _one_tracker(self) -> "Tracking":
        if not (self.mlflow or self.wandb or self.tensorboard):
            raise ValueError("set at least one of mlflow, wandb, tensorboard")
        return self
