"""Cross-field checks of a typed spec that pydantic's per-field validation cannot express."""

from __future__ import annotations

from collections import Counter

from kubetrain.jobspec.gputypes import gpu_type_error
from kubetrain.jobspec.model import TrainingJob
from kubetrain.jobspec.network import GPUDIRECT_VOLUMES
from kubetrain.jobspec.sweep import sweep_problems
from kubetrain.rules.command import no_program_python, nproc_flag
from kubetrain.rules.names import TORCHRUN_RESERVED_ENV
from kubetrain.rules.worldsize import procs_gpus_problem

RESERVED_VOLUMES = {"dshm", "code", "tmp"}
TORCH_RUNTIME = "torch-distributed"
# Directories of the image that a mount would hide (python, torch, libc, the dynamic loader, /proc...): a mount
# there, or below, leaves a pod that cannot start its interpreter. /opt and /var hold conda and package state.
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sbin",
               "/sys", "/usr", "/var")
TRAINJOB_RUN_POLICY = {"activeDeadlineSeconds"}  # what trainjob.yaml.j2 maps; any other field set is refused


def spec_problems(job: TrainingJob, target: str | None = None) -> list[tuple[str, str]]:
    """Every cross-field problem as (field path, message); empty when the spec is consistent.

    `target` overrides spec.target (as `render --target` does), so its own restrictions apply.
    """
    spec = job.spec
    problems: list[tuple[str, str]] = []
    if spec.command is None and spec.train is None:
        problems.append(("spec.command", "set either `command` (your program) or `train` (the Trainer API)"))
    if spec.command is not None and not spec.command:
        problems.append(("spec.command", "must not be empty"))
    if (target or spec.target) == "trainjob":
        problems += _trainjob_problems(job)
    if spec.elastic and not spec.elastic.minNodes <= spec.nodes <= spec.elastic.maxNodes:
        problems.append(("spec.nodes", f"{spec.nodes} must be between elastic.minNodes "
                         f"({spec.elastic.minNodes}) and elastic.maxNodes ({spec.elastic.maxNodes})"))
    problems += _placement_problems(job)
    problems += _gpu_problems(job, target or spec.target)
    problems += _network_problems(job)
    if spec.resources.guaranteed and not (spec.resources.cpu and spec.resources.memory):
        problems.append(("spec.resources.guaranteed", "needs resources.cpu and resources.memory (Guaranteed QoS "
                         "sets limits equal to requests for both)"))
    problems += _mount_problems(job)
    problems += _program_problems(job)
    problems += _checkpoint_problems(job)
    problems += _env_problems(job)
    problems += _name_length_problems(job, target or spec.target)
    problems += [(field, message) for field, severity, message in world_size_findings(job) if severity == "error"]
    if job.sweep is not None:
        problems += sweep_problems(job.sweep, spec)
    return problems


def world_size_findings(job: TrainingJob) -> list[tuple[str, str, str]]:
    """(field, severity, message) for process counts that do not match the pods' GPUs: spec.procsPerNode,
    and a torchrun command's --nproc-per-node (which overrides it)."""
    spec = job.spec
    counts = [("spec.procsPerNode", spec.procsPerNode), ("spec.command", nproc_flag(spec.command))]
    findings: list[tuple[str, str, str]] = []
    for field, procs in counts:
        if procs is not None and (found := procs_gpus_problem(procs, spec.gpusPerNode)):
            severity, message = found
            findings.append((field, severity, f"{message} (spec.gpusPerNode: {spec.gpusPerNode})"))
    return findings


def _trainjob_problems(job: TrainingJob) -> list[tuple[str, str]]:
    """What a TrainJob cannot express: Trainer v2 has no elastic mode, and its runtimePatches only reach
    some pod fields."""
    spec = job.spec
    unsupported = [
        ("spec.elastic", spec.elastic is not None, "Kubeflow Trainer v2 has no elastic training; use target "
         "pytorchjob or remove `elastic`"),
        ("spec.scheduling.priorityClass", spec.scheduling.priorityClass is not None, "a TrainJob cannot set the "
         "pods' priorityClassName; set it in the ClusterTrainingRuntime or use target pytorchjob"),
        ("spec.imagePullPolicy", spec.imagePullPolicy is not None, "a TrainJob cannot set imagePullPolicy; "
         "use a content-hash tag (`kubetrain build`) so IfNotPresent is right"),
        ("spec.placement.cloud", spec.placement.cloud == "kind" and spec.gpusPerNode > 0, "a TrainJob cannot set "
         "runtimeClassName: nvidia, which kind GPU nodes need; use target pytorchjob"),
        ("spec.network.fabric", spec.network is not None and spec.network.gpudirect, "Trainer v2's runtimePatches "
         "cannot add the GPUDirect daemon sidecar (initContainers take only name, env and volumeMounts); put it "
         "in the ClusterTrainingRuntime or use target pytorchjob"),
    ]
    reserved = sorted(set(spec.env) & set(TORCHRUN_RESERVED_ENV))
    unsupported.append(("spec.env", bool(reserved), f"{', '.join(reserved)} are set by the Trainer's torch runtime "
                        "(its webhook rejects them in the TrainJob); remove them"))
    for name in sorted(spec.runPolicy.model_fields_set - TRAINJOB_RUN_POLICY):
        unsupported.append((f"spec.runPolicy.{name}", True, "a TrainJob has no such setting (Trainer v2.3 maps only "
                            "activeDeadlineSeconds); remove it or use target pytorchjob"))
    return [(field, f"not supported with target trainjob: {why}") for field, bad, why in unsupported if bad]


def _placement_problems(job: TrainingJob) -> list[tuple[str, str]]:
    placement = job.spec.placement
    if placement.gpuType and job.spec.gpusPerNode == 0:
        return [("spec.placement.gpuType", "set, but gpusPerNode is 0 (a CPU job); remove it or request GPUs")]
    if placement.gpuType and placement.cloud in {"aks", "kind", "none"}:
        return [("spec.placement.gpuType", f"the {placement.cloud} profile has no GPU-model node label; select "
                 "nodes with placement.nodeSelector (e.g. node.kubernetes.io/instance-type) or use cloud generic")]
    if placement.gpuType and (error := gpu_type_error(placement.cloud, placement.gpuType)):
        return [("spec.placement.gpuType", error)]
    return []


def _gpu_problems(job: TrainingJob, target: str) -> list[tuple[str, str]]:
    """`gpus` against `gpusPerNode`, and what only Dynamic Resource Allocation can express."""
    spec, gpus = job.spec, job.spec.gpus
    if gpus is None:
        return []
    problems = []
    if gpus.count is not None and gpus.count != spec.gpusPerNode:
        problems.append(("spec.gpus.count", f"{gpus.count} but gpusPerNode is {spec.gpusPerNode}: they are the "
                         "same number; write one of them"))
    if gpus.via != "plugin" and spec.gpusPerNode == 0:
        problems.append(("spec.gpus.via", f"{gpus.via} asks for no GPUs: set gpusPerNode (or gpus.count)"))
    if gpus.selectors and gpus.via == "plugin":
        problems.append(("spec.gpus.selectors", "need Dynamic Resource Allocation (via: dra or auto); with the "
                         "device plugin choose the GPU model with placement.gpuType"))
    if gpus.via != "plugin" and target == "trainjob" and spec.trainingRuntime != TORCH_RUNTIME:
        problems.append(("spec.gpus.via", f"{gpus.via} with target trainjob needs trainingRuntime "
                         f"{TORCH_RUNTIME}: Trainer v2.3 cannot add pod resourceClaims through a TrainJob, so "
                         f"kubetrain renders a TrainingRuntime derived from {TORCH_RUNTIME} that claims the GPUs"))
    return problems


def _network_problems(job: TrainingJob) -> list[tuple[str, str]]:
    """GPUDirect-TCPX/TCPXO exist only on GKE's 8-GPU A3 nodes and add volumes of their own."""
    spec = job.spec
    if spec.network is None or not spec.network.gpudirect:
        return []
    problems = []
    if spec.gpusPerNode != 8:
        problems.append(("spec.gpusPerNode", f"fabric {spec.network.fabric} runs on 8-GPU A3 nodes; "
                         f"set gpusPerNode: 8 (got {spec.gpusPerNode})"))
    if spec.placement.cloud not in {"gke", "auto"}:
        problems.append(("spec.placement.cloud", f"fabric {spec.network.fabric} is GKE-only; set cloud: gke"))
    for i, volume in enumerate(spec.volumes):
        if volume.name in GPUDIRECT_VOLUMES:
            problems.append((f"spec.volumes[{i}].name", f"{volume.name!r} is used by the {spec.network.fabric} "
                             "fabric; rename the volume"))
    return problems


def _mount_problems(job: TrainingJob) -> list[tuple[str, str]]:
    spec = job.spec
    problems = []
    paths = [(f"spec.volumes[{i}].mountPath", v.mountPath) for i, v in enumerate(spec.volumes)]
    if spec.code:
        paths.append(("spec.code.mountPath", spec.code.mountPath))
    counts = Counter(path for _, path in paths)
    for field, path in paths:
        if counts[path] > 1:
            problems.append((field, f"{path} is mounted more than once"))
        elif path == "/dev/shm":
            problems.append((field, "/dev/shm is kubetrain's shared-memory mount; set `shmSize` instead"))
        elif _hides_the_image(path):
            instead = "/workspace" if field == "spec.code.mountPath" else "/data"
            problems.append((field, f"{path} would hide the image's own files there (python, torch, the system's "
                             f"libraries) and the pod could not start; use a directory of its own, e.g. {instead}"))
    names = Counter(v.name for v in spec.volumes)
    for i, volume in enumerate(spec.volumes):
        if volume.name in RESERVED_VOLUMES:
            problems.append((f"spec.volumes[{i}].name", f"{volume.name!r} is reserved by kubetrain"))
        elif names[volume.name] > 1:
            problems.append((f"spec.volumes[{i}].name", f"{volume.name!r} is used more than once"))
    return problems


def _hides_the_image(path: str) -> bool:
    path = path.rstrip("/") or "/"
    return path == "/" or any(path == top or path.startswith(top + "/") for top in SYSTEM_DIRS)


def _program_problems(job: TrainingJob) -> list[tuple[str, str]]:
    """A python with no script or module reads an empty stdin and exits 0: a "succeeded" job that ran nothing."""
    python = no_program_python(job.spec.command, job.spec.args)
    if python is None:
        return []
    return [("spec.command", f"{python} with no script or module runs nothing (it reads an empty stdin and exits "
             "0); name the program: [python, train.py] or [python, -m, train]")]


def _checkpoint_problems(job: TrainingJob) -> list[tuple[str, str]]:
    """Checkpoints that would not outlive the pod (no volume), or could not be written at all (a read-only
    mount); and a grace period that SIGKILLs the stop checkpoint."""
    spec = job.spec
    directory = spec.checkpoint.dir
    if not directory:
        return []
    problems = []
    if spec.terminationGracePeriodSeconds <= spec.checkpoint.sigtermTimeoutSeconds:
        timeout = spec.checkpoint.sigtermTimeoutSeconds
        problems.append(("spec.terminationGracePeriodSeconds", f"{spec.terminationGracePeriodSeconds} s leaves the "
                         f"stop checkpoint (checkpoint.sigtermTimeoutSeconds: {timeout} s) no time before SIGKILL; "
                         f"set it above {timeout}, e.g. {timeout + 30}, or lower checkpoint.sigtermTimeoutSeconds"))
    if "://" not in directory and (where := _checkpoint_dir_problem(job, directory)):
        problems.append(("spec.checkpoint.dir", where))
    return problems


def _checkpoint_dir_problem(job: TrainingJob, directory: str) -> str | None:
    spec = job.spec
    if not directory.startswith("/"):
        where = (f"the read-only code mount {spec.code.mountPath}" if spec.code
                 else "the image's working directory, lost with the pod")
        return (f"{directory!r} is relative: in the pod it is under the working directory, {where}; use an absolute "
                "path on a volume (e.g. /ckpt/run) or an object store URL")
    if spec.code and _under(directory, spec.code.mountPath):
        return (f"{directory} is on the read-only code mount (code.mountPath {spec.code.mountPath}): the first "
                "checkpoint would fail (EROFS); put it on a volume, e.g. /ckpt/run")
    mounts = [(i, v) for i, v in enumerate(spec.volumes) if _under(directory, v.mountPath)]
    if mounts:
        index, volume = max(mounts, key=lambda item: len(item[1].mountPath))  # the innermost mount holds it
        if volume.readOnly:
            return (f"{directory} is on the read-only volume {volume.name!r} (spec.volumes[{index}]): the first "
                    "checkpoint would fail (EROFS); mount it with readOnly: false")
        return None
    if spec.checkpoint.ephemeral:
        return None
    top = "/" + directory.strip("/").split("/")[0]
    return (f"{directory} is on no volume, so its checkpoints die with the pod: add volumes: [{{name: ckpt, claim: "
            f"CLAIM, mountPath: {top}}}], use an object store (s3://BUCKET/PREFIX), or set checkpoint.ephemeral: "
            "true for a scratch run")


def _under(path: str, mount: str) -> bool:
    mount = mount.rstrip("/")
    path = path.rstrip("/")
    return not mount or path == mount or path.startswith(mount + "/")


def _env_problems(job: TrainingJob) -> list[tuple[str, str]]:
    plain = set(job.spec.env)
    problems = [(f"spec.secretEnv[{i}].name", f"{s.name} is also set in spec.env")
                for i, s in enumerate(job.spec.secretEnv) if s.name in plain]
    wandb = job.spec.tracking.wandb if job.spec.tracking else None
    if wandb is not None and wandb.apiKeySecret is not None:
        problems += [(field, "WANDB_API_KEY is also set by spec.tracking.wandb.apiKeySecret")
                     for field, name in [*((f"spec.env.{k}", k) for k in plain),
                                         *((f"spec.secretEnv[{i}].name", s.name)
                                           for i, s in enumerate(job.spec.secretEnv))]
                     if name == "WANDB_API_KEY"]
    return problems


def _name_length_problems(job: TrainingJob, target: str) -> list[tuple[str, str]]:
    """Pod and Service names the operators derive must still be DNS labels (<= 63 characters)."""
    spec = job.spec
    count = spec.elastic.maxNodes if spec.elastic else spec.nodes
    if target == "trainjob":
        longest = f"{job.metadata.name}-node-0-{count - 1}"
    else:
        longest = f"{job.metadata.name}-worker-{max(count - 1, 0)}"
    if len(longest) > 63:
        return [("metadata.name", f"too long: the operator would name a pod {longest!r}, over 63 characters")]
    return []
