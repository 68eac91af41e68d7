"""What `kubetrain run` starts: one torchrun agent per node, c10d rendezvous on localhost.

Each agent runs exactly the program the manifests run: the command is parsed once
(`kubetrain.rules.command.parse_command`) for both. A torchrun command's own flags pass through, as in the
pod, except those that place the agent (rendezvous, node rank, node count, logging), which kubetrain sets
for its local rendezvous as the operator does per pod; its --nproc-per-node sets the process count, as it
does in the pod. The agents get the container's environment (`kubetrain.render.context.env`), paths
mapped to local directories, and secrets from `--env-file` or this environment. Building the plan starts
nothing and imports no torch.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import socket
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kubetrain.errors import UsageError
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.jobspec.model import JobSpec
from kubetrain.local.paths import PathMap, build_path_map
from kubetrain.podenv import LAUNCHER, NODE_ENV, PATH_MAP_ENV, RUN_ID_ENV, RUN_KEY_ENV, STORE_HOST_ENV
from kubetrain.render.context import RenderOptions, run_identity
from kubetrain.render.context import env as container_env
from kubetrain.rules.command import LaunchCommand, parse_command

LOCAL_CLUSTER = "local"  # the cluster tag of a tracked run started by `kubetrain run`
RANK_PREFIX = "[rank-${rank}]:"
# Variables of an enclosing launcher that must not leak into the agents (they set their own).
LAUNCHER_ENV_PREFIXES = ("PET_", "TORCHELASTIC_")
LAUNCHER_ENV = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_WORLD_SIZE", "ROLE_NAME"}
REDACTED = "<redacted>"
# torchrun flags of a command that kubetrain sets itself for the local agents (the operator's PET_*
# variables do it in a pod; the render warns about those a command pins).
LOCAL_FLAGS = frozenset({"--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id",
                         "--rdzv-conf", "--standalone", "--node-rank", "--master-addr", "--master-port",
                         "--local-addr", "--log-dir", "--tee", "--redirects", "--log-line-prefix-template",
                         "--monitor-interval", "--shutdown-timeout"})


@dataclass(frozen=True)
class RunOptions:
    """Command-line choices of `kubetrain run`."""

    env_file_values: Mapping[str, str] = field(default_factory=dict)
    volumes: list[str] = field(default_factory=list)
    nodes: int | None = None
    procs_per_node: int | None = None
    port: int = 0
    log_dir: Path | None = None
    dry_run: bool = False  # describe only: create no directory


@dataclass(frozen=True)
class NodeCommand:
    """One torchrun agent: node `index` (1-based), its argv and complete environment."""

    index: int
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class RunPlan:
    """Everything needed to start (and describe) a local run."""

    job_name: str
    run_id: str
    nodes: list[NodeCommand]
    procs_per_node: int
    cwd: Path
    path_map: PathMap
    elastic: bool
    secret_values: frozenset[str]
    stop_grace_seconds: float
    trainer_refs: dict[str, str]
    program: list[str]
    kind: str  # of the program: "trainer", "module", "script" or "executable" (LaunchCommand.kind)
    target: str  # the module, the local path of the script, or the executable

    def describe(self) -> list[str]:
        """The commands as shell lines, with secret values redacted (for --dry-run)."""
        lines = [f"cd {shlex.quote(str(self.cwd))}"]
        common = {k: v for k, v in self.nodes[0].env.items() if all(n.env.get(k) == v for n in self.nodes)}
        for key in sorted(common):
            if os.environ.get(key) != common[key] or key in {RUN_ID_ENV, PATH_MAP_ENV}:
                lines.append(f"export {key}={shlex.quote(self.redact(common[key]))}")
        for node in self.nodes:
            extra = {k: v for k, v in node.env.items() if k not in common}
            prefix = "".join(f"{k}={shlex.quote(self.redact(v))} " for k, v in sorted(extra.items()))
            lines.append(f"# node-{node.index}\n{prefix}{shlex.join(self.redact(a) for a in node.argv)} &")
        return lines

    def redact(self, value: str) -> str:
        return REDACTED if value in self.secret_values and value else value


def _secret_env(spec: JobSpec, env_file: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for index, secret in enumerate(spec.secretEnv):
        value = env_file.get(secret.name, environ.get(secret.name))
        if value is None:
            if secret.optional:
                continue
            raise UsageError(f"spec.secretEnv[{index}]: {secret.name} (Secret {secret.secret}, key "
                             f"{secret.key}) is not set: put it in an --env-file or export it")
        values[secret.name] = value
    return values


def _job_env(loaded: LoadedSpec, path_map: PathMap, code_dir: Path | None, environ: Mapping[str, str],
             secrets: dict[str, str]) -> dict[str, str]:
    """The agents' environment: this machine's, minus launcher variables, plus the container's."""
    base = {k: v for k, v in environ.items()
            if k not in LAUNCHER_ENV and not k.startswith(LAUNCHER_ENV_PREFIXES)}
    options = RenderOptions(cluster=LOCAL_CLUSTER)
    job = {item["name"]: path_map.rewrite(item["value"])
           for item in container_env(loaded.job, options) if "value" in item}
    if loaded.job.spec.tracking:
        job.update(_local_run_key(loaded, options, path_map, job))
    if code_dir is not None:
        job["PYTHONPATH"] = os.pathsep.join(p for p in (str(code_dir), environ.get("PYTHONPATH")) if p)
    job[PATH_MAP_ENV] = path_map.to_env()
    job.update(secrets)
    return {**base, **job}


def _local_run_key(loaded: LoadedSpec, options: RenderOptions, path_map: PathMap,
                   job: dict[str, str]) -> dict[str, str]:
    """A local run's key names its local checkpoint directory: another --volume is another run."""
    identity = run_identity(loaded.job, options)
    directory = identity.checkpoint_dir
    key = dataclasses.replace(identity, checkpoint_dir=path_map.rewrite(directory) if directory else None).key
    return {RUN_KEY_ENV: key, **({"WANDB_RUN_ID": key} if "WANDB_RUN_ID" in job else {})}


def _agent_argv(spec: JobSpec, plan_args: list[str], *, index: int, nodes: int, procs: int,
                endpoint: str, run_id: str, log_dir: Path | None) -> list[str]:
    nnodes = f"{spec.elastic.minNodes}:{spec.elastic.maxNodes}" if spec.elastic else str(nodes)
    argv = [sys.executable, "-m", LAUNCHER, "--nnodes", nnodes, "--nproc-per-node", str(procs),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
            "--rdzv-conf", "is_host=0,last_call_timeout=2",  # node 1's launcher serves the store
            "--max-restarts", str(spec.elastic.maxRestarts if spec.elastic else 0),
            "--monitor-interval", "0.5", "--local-addr", "127.0.0.1",
            "--shutdown-timeout", str(spec.checkpoint.sigtermTimeoutSeconds + 2),
            "--tee", "3", "--log-line-prefix-template", RANK_PREFIX]
    if log_dir is not None:
        argv += ["--log-dir", str(log_dir / f"node-{index}")]
    return argv + plan_args


def _sizes(spec: JobSpec, options: RunOptions, command: LaunchCommand) -> tuple[int, int]:
    """Nodes and processes per node: the flag, else the command's --nproc-per-node (which wins over
    PET_NPROC_PER_NODE in the pod too), else the spec."""
    nodes = options.nodes or spec.nodes
    if spec.elastic and not spec.elastic.minNodes <= nodes <= spec.elastic.maxNodes:
        raise UsageError(f"--nodes {nodes}: must be between elastic.minNodes ({spec.elastic.minNodes}) and "
                         f"elastic.maxNodes ({spec.elastic.maxNodes})")
    nproc = command.flag("--nproc-per-node") or ""
    return nodes, options.procs_per_node or (int(nproc) if nproc.isdigit() else spec.procs_per_node)


def _node_env(spec: JobSpec, env: dict[str, str], index: int, procs: int, total: int) -> dict[str, str]:
    """Per-node variables: disjoint GPUs per node (as on separate machines) and a fair thread count."""
    env = dict(env)
    env[NODE_ENV] = str(index)
    if index == 1:
        env[STORE_HOST_ENV] = "1"  # its launcher serves the rendezvous store (kubetrain.runtime.launch)
    if spec.gpusPerNode and "CUDA_VISIBLE_DEVICES" not in env:
        first = (index - 1) * spec.gpusPerNode
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(spec.gpusPerNode))
    elif "CUDA_VISIBLE_DEVICES" not in env:
        # A CPU job sees no GPU, as its pods do (NVIDIA_VISIBLE_DEVICES=void): on a GPU workstation the runtime
        # would otherwise pick nccl and put every node's rank 0 on cuda:0, which NCCL refuses ("Duplicate GPU
        # detected", seen on an H200: docs/gpu.md).
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // total)))
    # torch 2.15 shares one rendezvous TCPStore across restart rounds without a per-round key prefix, so
    # restarted workers can read the previous round's gloo addresses and fail to connect: use a fresh
    # store (hosted by rank 0 on a new port) for every round.
    env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return env


def build_plan(loaded: LoadedSpec, options: RunOptions, environ: Mapping[str, str] | None = None,
               cwd: Path | None = None) -> RunPlan:
    """Resolve everything `kubetrain run` needs; raises UsageError naming the field or flag at fault."""
    environ = os.environ if environ is None else environ
    spec = loaded.job.spec
    command = parse_command(spec.command, spec.args)
    nodes, procs = _sizes(spec, options, command)
    run_id = f"{loaded.job.metadata.name}-{uuid.uuid4().hex[:8]}"
    path_map, code_dir = build_path_map(loaded, options.volumes, cwd or Path.cwd(), run_id,
                                        create=not options.dry_run)
    secrets = _secret_env(spec, options.env_file_values, environ)
    env = _job_env(loaded, path_map, code_dir, environ, secrets)
    env[RUN_ID_ENV] = run_id
    workdir = spec.code.mountPath if spec.code else None
    program = [path_map.rewrite(arg) for arg in command.torchrun_args(workdir, drop=LOCAL_FLAGS)]
    target = command.program(workdir)[0] if command.kind == "script" else command.target
    port = options.port or free_port()
    endpoint = f"127.0.0.1:{port}"
    commands = [NodeCommand(i, _agent_argv(spec, program, index=i, nodes=nodes, procs=procs,
                                           endpoint=endpoint, run_id=run_id, log_dir=options.log_dir),
                            _node_env(spec, env, i, procs, nodes * procs)) for i in range(1, nodes + 1)]
    refs = {name: getattr(spec.train, name) for name in ("model", "dataset", "loss", "optimizer", "scheduler")
            if spec.train and getattr(spec.train, name)}
    return RunPlan(loaded.job.metadata.name, run_id, commands, procs, code_dir or loaded.base_dir, path_map,
                   spec.elastic is not None, frozenset(secrets.values()),
                   float(spec.checkpoint.sigtermTimeoutSeconds + 10), refs, program,
                   command.kind,
                   path_map.rewrite(target))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
