"""`cluster create` / `cluster delete`: host checks, idempotent steps, waiting for GPUs, and a summary."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubetrain.errors import ClusterError, UsageError
from kubetrain.imagebuild.kindnodes import node_engine
from kubetrain.imagebuild.process import CommandFailed, Echo, echo_stderr, run_captured, run_streamed
from kubetrain.kind.config import DEVICES_DIR, render_config
from kubetrain.kind.prereqs import Gpu, check_host
from kubetrain.kind.steps import (
    TRAINING_OPERATOR_KUSTOMIZE,
    Step,
    device_plugin_step,
    gpu_worker_steps,
    operator_rollout,
    run_steps,
    runtime_class_step,
    streamed,
    training_operator_step,
)
from kubetrain.kube.objects import GPU_RESOURCE

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
KIND_NETWORK = "kind"


@dataclass(frozen=True)
class CreateOptions:
    name: str = "kubetrain"
    gpus: list[int] | None = None  # None: one worker with every GPU
    cpu_only: bool = False
    node_image: str | None = None
    timeout: float = 600.0  # for GPUs to become allocatable
    operator_manifests: str = TRAINING_OPERATOR_KUSTOMIZE
    rerun: str = "kubetrain cluster create"  # the command line to suggest after a failure


@dataclass(frozen=True)
class NodeInfo:
    name: str
    role: str
    ready: bool
    gpus: int


@dataclass(frozen=True)
class Summary:
    name: str
    context: str
    nodes: list[NodeInfo]
    cpu_only: bool

    @property
    def gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)


def create_cluster(options: CreateOptions, *, echo: Echo = echo_stderr,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> Summary:
    host_gpus = check_host(options.cpu_only)
    _check_indexes(options.gpus, host_gpus)
    context = f"kind-{options.name}"
    hint = f"fix the cause and re-run `{options.rerun}`: finished steps are skipped"
    config = render_config(options.name, options.gpus, cpu_only=options.cpu_only,
                           node_image=options.node_image)
    run_steps([_create_step(options, config)], echo, hint)
    steps, expected = ([], 0) if options.cpu_only else _gpu_steps(options.name, context, host_gpus)
    run_steps([*steps, training_operator_step(context, options.operator_manifests)], echo, hint)
    code, tail = run_streamed(operator_rollout(context), echo=echo)
    if code != 0:
        raise CommandFailed("the training-operator did not become ready", tail, hint)
    nodes = wait_for_gpus(context, expected, options.timeout, echo=echo, sleep=sleep, clock=clock)
    return Summary(options.name, context, nodes, options.cpu_only)


def _gpu_steps(name: str, context: str, host_gpus: list[Gpu]) -> tuple[list[Step], int]:
    """The per-worker and cluster-wide GPU steps, and how many GPUs should end up allocatable."""
    workers = gpu_workers(name)
    if not workers:
        raise ClusterError(f"kind cluster {name!r} exists but has no GPU workers (created with --cpu-only?): "
                           f"delete it with `kubetrain cluster delete --name {name}` and create it again")
    steps: list[Step] = []
    expected = 0
    for node, devices in workers.items():
        visible = [g.index for g in host_gpus] if devices == ["all"] else [int(d) for d in devices]
        expected += len(visible)
        steps += gpu_worker_steps(node, [g.index for g in host_gpus if g.index not in visible])
    return [*steps, runtime_class_step(context), device_plugin_step(context)], expected


def _check_indexes(wanted: list[int] | None, host: list[Gpu]) -> None:
    known = {gpu.index for gpu in host}
    missing = [i for i in wanted or [] if host and i not in known]
    if missing:
        have = ",".join(str(i) for i in sorted(known))
        absent = ",".join(map(str, missing))
        raise UsageError(f"--gpus: this host has no GPU {absent} (nvidia-smi -L lists {have})")


def _create_step(options: CreateOptions, config: str) -> Step:
    argv = ["kind", "create", "cluster", "--name", options.name, "--config=-", "--wait", "120s"]
    if options.node_image:
        argv += ["--image", options.node_image]
    return Step(f"kind cluster {options.name}", lambda: cluster_exists(options.name),
                streamed(argv, stdin=config))


def cluster_exists(name: str) -> bool:
    result = run_captured(["kind", "get", "clusters"])
    if result.code != 0:
        raise CommandFailed(f"`kind get clusters` exited {result.code}", result.stderr.splitlines()[-5:])
    return name in result.stdout.split()


def gpu_workers(name: str) -> dict[str, list[str]]:
    """Node container → the GPUs its /dev/null mounts request ('all' or indexes), for nodes with any."""
    nodes = run_captured(["kind", "get", "nodes", "--name", name])
    names = sorted(nodes.stdout.split()) if nodes.code == 0 else []
    if not names:
        raise CommandFailed(f"`kind get nodes --name {name}` listed no nodes", nodes.stderr.splitlines()[-5:])
    inspected = run_captured(["docker", "inspect", "--format", "{{json .Mounts}}", *names])
    if inspected.code != 0:
        raise CommandFailed(f"`docker inspect` of the kind nodes exited {inspected.code}",
                            inspected.stderr.splitlines()[-5:])
    workers: dict[str, list[str]] = {}
    for node, line in zip(names, inspected.stdout.splitlines(), strict=False):
        mounts = json.loads(line or "[]") or []
        devices = sorted(m["Destination"].rsplit("/", 1)[1] for m in mounts
                         if str(m.get("Destination", "")).startswith(DEVICES_DIR + "/"))
        if devices:
            workers[node] = devices
    return workers


def wait_for_gpus(context: str, expected: int, timeout: float, *, echo: Echo,
                  sleep: Callable[[float], None], clock: Callable[[], float]) -> list[NodeInfo]:
    """Poll `kubectl get nodes -o json` until every node is Ready and `expected` GPUs are allocatable."""
    deadline = clock() + timeout
    what = f"{expected} allocatable {GPU_RESOURCE}" if expected else "every node to be Ready"
    echo(f"kubetrain: waiting for {what}")
    while True:
        nodes = list_nodes(context)
        if nodes and all(n.ready for n in nodes) and sum(n.gpus for n in nodes) >= expected:
            return nodes
        if clock() >= deadline:
            found = sum(n.gpus for n in nodes)
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what} (found {found}); see "
                               f"`kubectl --context {context} -n nvidia-device-plugin logs "
                               "daemonset/nvidia-device-plugin`")
        sleep(5.0)


def list_nodes(context: str) -> list[NodeInfo]:
    result = run_captured(["kubectl", "--context", context, "get", "nodes", "--output", "json"])
    try:
        items = json.loads(result.stdout).get("items", []) if result.code == 0 else []
    except ValueError:
        items = []
    return [_node_info(item) for item in items if isinstance(item, dict)]


def _node_info(item: dict[str, Any]) -> NodeInfo:
    metadata, status = item.get("metadata", {}), item.get("status", {})
    role = "control-plane" if CONTROL_PLANE_LABEL in metadata.get("labels", {}) else "worker"
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    gpus = status.get("allocatable", {}).get(GPU_RESOURCE, "0")
    return NodeInfo(metadata.get("name", "?"), role, ready, int(gpus) if str(gpus).isdigit() else 0)


def delete_cluster(name: str, *, echo: Echo = echo_stderr) -> bool:
    """Delete the kind cluster; False (and no error) when there is none."""
    if not cluster_exists(name):
        echo(f"kubetrain: no kind cluster named {name!r}; nothing to delete")
        return False
    code, tail = run_streamed(["kind", "delete", "cluster", "--name", name], echo=echo)
    if code != 0:
        raise CommandFailed(f"`kind delete cluster --name {name}` exited {code}", tail)
    _remove_kind_network(echo)
    return True


def _remove_kind_network(echo: Echo) -> None:
    """kind leaves its `kind` network behind for the next cluster; with no kind cluster left, remove it."""
    engine = node_engine()
    if run_captured(["kind", "get", "clusters"]).stdout.split():
        return
    if run_captured([engine, "network", "inspect", KIND_NETWORK]).code != 0:
        return
    result = run_captured([engine, "network", "rm", KIND_NETWORK])
    if result.code != 0:
        echo(f"kubetrain: could not remove the {engine} network {KIND_NETWORK!r} "
             f"({(result.stderr.strip().splitlines() or ['?'])[-1]}); it is unused, remove it at will")
    else:
        echo(f"kubetrain: removed the {engine} network {KIND_NETWORK!r} (no kind cluster is left)")


def format_summary(summary: Summary) -> str:
    """What the cluster has and what to run next (printed on stdout)."""
    width = max([len(n.name) for n in summary.nodes] + [4])
    rows = [f"  {'NODE':<{width}}  {'ROLE':<13}  {'READY':<5}  GPUS"]
    rows += [f"  {n.name:<{width}}  {n.role:<13}  {'yes' if n.ready else 'no':<5}  {n.gpus}"
             for n in summary.nodes]
    gpu_line = "CPU only (no GPUs)" if summary.cpu_only else f"{summary.gpus} x {GPU_RESOURCE} allocatable"
    spec = ("spec.gpusPerNode: 0 and spec.build.variant: cpu" if summary.cpu_only
            else "spec.placement.cloud: kind (GPU nodes + RuntimeClass nvidia)")
    return "\n".join([
        f"kind cluster {summary.name!r} is ready: kubectl context {summary.context}, {gpu_line}",
        *rows,
        "Next:",
        f"  1. in kubetrain.yaml: {spec}, and spec.imagePullPolicy: IfNotPresent",
        f"  2. kubetrain build --kind {summary.name}",
        f"  3. kubetrain render --image \"$(kubetrain build --kind {summary.name})\" "
        f"| kubectl --context {summary.context} apply --server-side -f -",
        f"  Remove it with: kubetrain cluster delete --name {summary.name}",
    ]) + "\n"
