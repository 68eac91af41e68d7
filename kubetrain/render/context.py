"""Derived values for the templates: env, resources, volumes, placement, labels. Pure functions of the spec."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubetrain.jobspec.model import JobSpec, TrainingJob
from kubetrain.jobspec.network import FABRICS
from kubetrain.kube.objects import GPU_RESOURCE, JOB_LABEL, QUEUE_LABEL
from kubetrain.podenv import CONFIG_ENV, HANG_ENV, JOB_NAME_ENV, POD_PROGRESS_DIR, process_group_timeout, progress_env
from kubetrain.render import dra
from kubetrain.render.code import CodeBundle, configmap_payload
from kubetrain.render.gpudirect import gpudirect_annotations, gpudirect_env, gpudirect_sidecar, gpudirect_volumes
from kubetrain.render.launch import container_command, torchrun_args
from kubetrain.render.placement import placement_for
from kubetrain.render.tracking import RunIdentity, tracking_env, tracking_secret_env
from kubetrain.rules.quantity import format_bytes, parse_quantity

MASTER_PORT = 23456  # the operator's default, named pytorchjob-port
MANAGED_BY = "kubetrain"
SPEC_HASH_ANNOTATION = "kubetrain.dev/spec-hash"
# spec.archive, kept on the job object so `kubetrain logs/metrics NAME` find the archive once the pods are gone
ARCHIVE_ANNOTATION = "kubetrain.dev/archive"
GPU_POD_ANNOTATIONS = {
    # A checkpoint-less eviction of one rank kills every rank: keep autoscalers away from running jobs.
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}
GPU_ENV = {"NCCL_DEBUG": "WARN", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
# CUDA base images set NVIDIA_VISIBLE_DEVICES=all, and on a node whose default runtime is nvidia's, a container
# that requests no nvidia.com/gpu then sees every GPU of the node, including GPUs the device plugin gave other
# pods (NVIDIA/k8s-device-plugin#61). `void` is the NVIDIA Container Toolkit's value for "no GPUs".
NO_GPU_ENV = {"NVIDIA_VISIBLE_DEVICES": "void"}
# torch 2.15's agents share one rendezvous TCP store across restarts; after a worker dies, restarted workers
# can read the previous round's addresses and never connect. Elastic jobs restart in place, so opt out.
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# NCCL's INIT lines name the network it picked ("via NET/Socket/0"): status and logs read them to warn when a
# fabric job fell back to sockets (kubetrain.observe.nccl). INIT keeps it to a few lines per rank.
FABRIC_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
             "TORCH_SHOW_CPP_STACKTRACES": "1", "CUDA_LAUNCH_BLOCKING": "1"}
DEFAULT_SHM = 2 * 2**30
MIN_SHM = 2**30


@dataclass(frozen=True)
class RenderOptions:
    """Inputs to rendering besides the spec: all explicit, so rendering stays a pure function."""

    code: CodeBundle | None = None
    cloud: str | None = None  # a resolved profile for `placement.cloud: auto`
    image: str | None = None  # the image reference `kubetrain build` just made
    namespace: str | None = None
    # Where this child's checkpoints go instead of spec.checkpoint.dir: the controller's directory for a job
    # recreated from a changed spec (a fresh start). Not part of the spec hash: it does not change the spec.
    checkpoint_dir: str | None = None
    gpu_via: str | None = None  # plugin or dra for `gpus.via: auto`, as submit found the cluster
    cluster: str | None = None  # the cluster's name, for spec.tracking (its run's tag and identity)


def gpu_via(job: TrainingJob, options: RenderOptions) -> str:
    return dra.gpu_via(job.spec, options.gpu_via)


def spec_hash(job: TrainingJob, options: RenderOptions) -> str:
    # Sections added later are left out while unset, so the hashes of jobs without them are those they had
    # before the sections existed (a changed hash is a changed job to the controller after an upgrade).
    dumped = job.model_dump(mode="json", by_alias=True, exclude={"sweep"})  # a trial's spec has no sweep
    for section in ("gpus", "tracking"):
        if dumped["spec"].get(section) is None:
            dumped["spec"].pop(section, None)
    if "divergence" not in job.spec.model_fields_set:
        dumped["spec"].pop("divergence", None)
    if not job.spec.checkpoint.ephemeral:
        dumped["spec"]["checkpoint"].pop("ephemeral", None)
    payload = {"spec": dumped, "code": options.code.digest if options.code else None, "cloud": options.cloud,
               "image": options.image}
    if options.gpu_via:
        payload["gpuVia"] = options.gpu_via
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def shm_bytes(spec: JobSpec) -> int:
    if spec.shmSize:
        return int(parse_quantity(spec.shmSize))
    if spec.resources.memory:
        return max(MIN_SHM, int(parse_quantity(spec.resources.memory)) // 4 // 2**20 * 2**20)
    return DEFAULT_SHM


def resources(spec: JobSpec, via: str = dra.PLUGIN) -> dict[str, Any]:
    """Requests and limits. GPU requests equal limits (the apiserver insists); /dev/shm is tmpfs charged to
    the container's memory cgroup, so the memory limit is `resources.memory` plus the shm size. With DRA the
    GPUs are the pod's claim instead of a limit."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.resources.cpu:
        requests["cpu"] = spec.resources.cpu
    if spec.resources.memory:
        requests["memory"] = spec.resources.memory
        limits["memory"] = format_bytes(parse_quantity(spec.resources.memory) + Decimal(shm_bytes(spec)))
    if spec.resources.ephemeralStorage:
        requests["ephemeral-storage"] = limits["ephemeral-storage"] = spec.resources.ephemeralStorage
    if spec.gpusPerNode and via == dra.PLUGIN:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(spec.gpusPerNode)
    if spec.network and spec.network.resource_name:
        requests[spec.network.resource_name] = limits[spec.network.resource_name] = str(spec.network.devices)
    if spec.resources.guaranteed:
        # Guaranteed QoS: every container's requests equal its limits for both cpu and memory.
        limits["cpu"] = requests["cpu"]
        requests["memory"] = limits["memory"]
    claims = [{"name": dra.CLAIM}] if spec.gpusPerNode and via == dra.DRA else []
    return {key: value for key, value in (("requests", requests), ("limits", limits), ("claims", claims)) if value}


def env(job: TrainingJob, options: RenderOptions | None = None) -> list[dict[str, Any]]:
    """Container env: defaults, then the debug preset, the tracking section, the user's values, then Secret
    references."""
    options = options or RenderOptions()
    checkpoint_dir = options.checkpoint_dir
    spec = job.spec
    values = {"PYTHONUNBUFFERED": "1", JOB_NAME_ENV: job.metadata.name}
    if spec.gpusPerNode:
        values.update(GPU_ENV)
    else:
        values.update(NO_GPU_ENV)
    if spec.elastic:
        values.update(ELASTIC_ENV)
    if spec.network:
        values.update(gpudirect_env(spec.network) if spec.network.gpudirect else FABRICS[spec.network.fabric][1])
        values.update({} if spec.debug else FABRIC_ENV)  # the debug preset logs every subsystem
    if spec.debug:
        values.update(DEBUG_ENV)
    if spec.code:
        values["PYTHONPATH"] = spec.code.mountPath
    if spec.security.readOnlyRootFilesystem:
        values["TMPDIR"] = "/tmp"
    values.update(progress_env(POD_PROGRESS_DIR))
    values[HANG_ENV] = spec.hang.model_dump_json(by_alias=True)  # read back by `kubetrain stacks` and status
    runtime_config = _runtime_config(spec, checkpoint_dir)
    if runtime_config:
        values[CONFIG_ENV] = runtime_config
    if spec.tracking:
        values.update(tracking_env(job, run_identity(job, options), tracking_tags(job, options)))
    values.update(spec.env)
    items: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    for secret in spec.secretEnv:
        ref = {"name": secret.secret, "key": secret.key, **({"optional": True} if secret.optional else {})}
        items.append({"name": secret.name, "valueFrom": {"secretKeyRef": ref}})
    return items + tracking_secret_env(job)


def run_identity(job: TrainingJob, options: RenderOptions) -> RunIdentity:
    """The job's tracked run: its cluster, namespace, name and checkpoint directory."""
    return RunIdentity(options.cluster or "", options.namespace or job.metadata.namespace or "default",
                       job.metadata.name, options.checkpoint_dir or job.spec.checkpoint.dir)


def tracking_tags(job: TrainingJob, options: RenderOptions) -> dict[str, str]:
    """The run's tags that only the render knows: image, code and spec hashes."""
    tags = {"kubetrain.image": options.image or job.spec.image, "kubetrain.spec-hash": spec_hash(job, options)}
    if options.code is not None:
        tags["kubetrain.code-hash"] = options.code.digest
    return tags


def _runtime_config(spec: JobSpec, checkpoint_dir: str | None = None) -> str | None:
    """The Trainer API, checkpoint and divergence settings, as JSON for kubetrain.runtime in the container.
    `checkpoint_dir` replaces spec.checkpoint.dir (only where checkpointing is on)."""
    if spec.train is None and spec.checkpoint.dir is None:
        return None
    train = spec.train.model_dump(mode="json", by_alias=True) if spec.train else None
    if train is not None and "timeoutSeconds" not in spec.train.model_fields_set:  # type: ignore[union-attr]
        train["timeoutSeconds"] = process_group_timeout(spec.hang)
    # `ephemeral` is a render-time permission (kubetrain.jobspec.checks); the runtime has no use for it
    checkpoint = spec.checkpoint.model_dump(mode="json", by_alias=True, exclude={"ephemeral"})
    if checkpoint_dir and spec.checkpoint.dir:
        checkpoint["dir"] = checkpoint_dir
    config = {"train": train, "checkpoint": checkpoint}
    if "divergence" in spec.model_fields_set:  # the runtime's default otherwise (existing manifests unchanged)
        config["divergence"] = spec.divergence.model_dump(mode="json", by_alias=True)
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def security_context(spec: JobSpec) -> dict[str, Any]:
    non_root = spec.security.runAsNonRoot
    rdma = spec.network is not None and not spec.network.gpudirect
    if non_root is None:
        non_root = spec.build is not None  # kubetrain's images run as uid 1000
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        # RDMA fabrics pin (mlock) communication buffers, which needs IPC_LOCK.
        "capabilities": {"drop": ["ALL"], **({"add": ["IPC_LOCK"]} if rdma else {})},
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": non_root,
    }
    if spec.security.runAsUser is not None:
        context["runAsUser"] = spec.security.runAsUser
    if spec.security.readOnlyRootFilesystem:
        context["readOnlyRootFilesystem"] = True
    return context


def volumes_and_mounts(job: TrainingJob, options: RenderOptions) -> tuple[list[Any], list[Any]]:
    spec = job.spec
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                                  "sizeLimit": format_bytes(shm_bytes(spec))}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for volume in spec.volumes:
        claim = {"claimName": volume.claim, **({"readOnly": True} if volume.readOnly else {})}
        volumes.append({"name": volume.name, "persistentVolumeClaim": claim})
        mounts.append({"name": volume.name, "mountPath": volume.mountPath,
                       **({"readOnly": True} if volume.readOnly else {})})
    if spec.security.readOnlyRootFilesystem and all(v.mountPath != "/tmp" for v in spec.volumes):
        # A read-only root breaks everything that writes temp files (torch.compile, DataLoader, pip caches).
        volumes.append({"name": "tmp", "emptyDir": {}})
        mounts.append({"name": "tmp", "mountPath": "/tmp"})
    if spec.network and spec.network.gpudirect:
        extra_volumes, extra_mounts = gpudirect_volumes(spec.network)
        volumes += extra_volumes
        mounts += extra_mounts
    if spec.code and options.code is not None:
        _, _, items = configmap_payload(options.code)
        volumes.append({"name": "code", "configMap": {"name": code_configmap_name(job, options.code),
                                                       "items": items}})
        mounts.append({"name": "code", "mountPath": spec.code.mountPath, "readOnly": True})
    return volumes, mounts


def code_configmap_name(job: TrainingJob, code: CodeBundle) -> str:
    # Content-addressed: a new code version is a new ConfigMap, never a mutation under a running job.
    return f"{job.metadata.name}-code-{code.digest[:10]}"


def labels(job: TrainingJob) -> dict[str, str]:
    values = {**job.metadata.labels, "app.kubernetes.io/name": job.metadata.name,
              "app.kubernetes.io/managed-by": MANAGED_BY, JOB_LABEL: job.metadata.name}
    if job.spec.scheduling.queue:
        values[QUEUE_LABEL] = job.spec.scheduling.queue
    return values


def pod_annotations(job: TrainingJob) -> dict[str, str]:
    base = GPU_POD_ANNOTATIONS if job.spec.gpusPerNode else {}
    network = job.spec.network
    fabric = gpudirect_annotations(network, job.spec.gpusPerNode or 0) if network and network.gpudirect else {}
    return {**base, **fabric, **job.metadata.annotations}


def job_annotations(job: TrainingJob, options: RenderOptions) -> dict[str, str]:
    archive = {ARCHIVE_ANNOTATION: job.spec.archive} if job.spec.archive else {}
    return {**job.metadata.annotations, **archive, SPEC_HASH_ANNOTATION: spec_hash(job, options)}


def template_context(job: TrainingJob, options: RenderOptions) -> dict[str, Any]:
    spec = job.spec
    volumes, mounts = volumes_and_mounts(job, options)
    workdir = spec.code.mountPath if spec.code else None
    via = gpu_via(job, options)
    return {
        "name": job.metadata.name,
        "namespace": options.namespace or job.metadata.namespace,
        "labels": labels(job),
        "annotations": job_annotations(job, options),
        "pod_annotations": pod_annotations(job),
        "spec": spec,
        "image": options.image or spec.image,
        "command": container_command(spec.archive, job.metadata.name),
        "args": torchrun_args(spec, workdir),
        "workdir": workdir,
        "env": env(job, options),
        "resources": resources(spec, via),
        "gpu_claims": via == dra.DRA and spec.gpusPerNode > 0,
        "runtime_name": dra.runtime_name(job.metadata.name),
        "pod_claims": {replica: dra.pod_claims(job, replica) for replica in ("master", "worker", "node")},
        "security_context": security_context(spec),
        "volumes": volumes,
        "mounts": mounts,
        "placement": placement_for(spec, options.cloud),
        "sidecars": [gpudirect_sidecar(spec.network)] if spec.network and spec.network.gpudirect else [],
        "port": MASTER_PORT,
        "procs_per_node": spec.procs_per_node,
    }
