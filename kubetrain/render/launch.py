"""How the container starts: torchrun, reading the operator's PET_* variables, then the user's program.

Most PyTorchJobs in the wild already start with a launcher (`torchrun ...`, `python -m torch.distributed.run
...`). kubetrain passes such a command's flags to its own torchrun instead of wrapping it in a second one
(which would start nproc x nproc processes per pod). torchrun takes every flag it is not given from the
PET_* variables the operator sets (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR...), so
flags that disagree with the spec, or pin a rank or address, are warned about. `accelerate launch` and
`deepspeed` are refused by the spec checks (`launcher_problem`): both start their own multi-node launcher.

The container's main process is a POSIX-sh wrapper around torchrun (`container_command`, see STOP_WRAPPER).
"""

from __future__ import annotations

from kubetrain.jobspec.model import JobSpec
from kubetrain.rules.command import launcher, parse_command

_REFUSED = {
    "accelerate": "`accelerate launch` starts its own launcher, but kubetrain already runs torchrun on every pod; "
                  "use command: [python, train.py] (Accelerator() reads torchrun's environment)",
    "deepspeed": "the deepspeed launcher reaches the other nodes over ssh/pdsh, which pods do not have; use "
                 "command: [python, train.py] (deepspeed.initialize() reads torchrun's environment)",
    "torch.distributed.launch": "torch.distributed.launch is deprecated and passes --local-rank to your script; "
                                "use command: [torchrun, ...] or [python, train.py]",
}
_PINNED = ("--node-rank", "--master-addr", "--master-port", "--rdzv-endpoint", "--rdzv-id")

# The pod's main process. torchrun exits 1 when it is stopped by SIGTERM (its workers have written their stop
# checkpoint and exited 143), so `restartPolicy: ExitCode` would treat every preemption as a permanent
# failure. The kubelet signals only the container's main process, so this sh runs torchrun as a child,
# forwards SIGTERM/SIGINT to it, waits for it to finish (the workers' stop checkpoint) and then exits
# 128 + signal (143 for SIGTERM); without a signal it exits with torchrun's own code. POSIX sh only, so it
# works in any image that has torch, kubetrain installed or not. `wait` returns early (>128) when a trapped
# signal arrives, hence the loop until torchrun is really gone. Kubernetes appends `args` to `command`:
# they become "$@" ($0 is the name after the script).
STOP_WRAPPER = (
    'stop=0; child=""; '
    'trap \'stop=143; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null\' TERM; '
    'trap \'stop=130; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null\' INT; '
    'torchrun "$@" & child=$!; '
    '[ "$stop" = 0 ] || kill -TERM "$child" 2>/dev/null; '
    'wait "$child"; code=$?; '
    'while kill -0 "$child" 2>/dev/null; do wait "$child"; code=$?; done; '
    'if [ "$stop" != 0 ]; then '
    'echo "kubetrain: stopped by a signal; torchrun exited $code; exit code $stop" >&2; exit "$stop"; fi; '
    'exit "$code"'
)


def container_command(archive: str | None = None, job: str | None = None) -> list[str]:
    """The container's `command`; torchrun's arguments (`torchrun_args`) are its `args`. With `spec.archive`,
    kubetrain's archive wrapper (kubetrain.observe.archive; needs kubetrain in the image) runs it all and
    copies the output to the archive as it is written."""
    command = ["sh", "-c", STOP_WRAPPER, "torchrun"]
    if archive:
        return ["python", "-m", "kubetrain.observe.archive", "--url", archive, "--job", str(job), "--", *command]
    return command


def launcher_problem(command: list[str] | None) -> str | None:
    """Why the command's launcher cannot run under kubetrain's torchrun, or None."""
    found = launcher(command)
    return _REFUSED.get(found[0]) if found else None


def torchrun_args(spec: JobSpec, workdir: str | None = None) -> list[str]:
    """Arguments to `torchrun` that run the spec's program (rendezvous settings come from PET_* env).

    A torchrun command passes its own flags through; `python -m mod` becomes `-m mod`, `python script.py`
    becomes `script.py` (absolute under `workdir`, since a TrainJob cannot set the working directory),
    anything else runs with `--no-python` (kubetrain.rules.command).
    """
    return parse_command(spec.command, spec.args).torchrun_args(workdir)


def launcher_warnings(spec: JobSpec) -> list[str]:
    """Flags of a torchrun command that contradict the spec or pin what the operator sets per pod."""
    command = parse_command(spec.command)
    if command.launcher != "torchrun":
        return []
    warnings = []
    nproc = command.flag("--nproc-per-node")
    same = nproc in {"gpu", "auto"} and spec.gpusPerNode == spec.procs_per_node  # torchrun counts the pod's GPUs
    if nproc is not None and nproc != str(spec.procs_per_node) and not same:
        warnings.append(f"spec.command: --nproc-per-node={nproc} overrides the spec's {spec.procs_per_node} "
                        "process(es) per pod (procsPerNode/gpusPerNode)")
    nnodes = command.flag("--nnodes")
    expected = f"{spec.elastic.minNodes}:{spec.elastic.maxNodes}" if spec.elastic else str(spec.nodes)
    if nnodes is not None and nnodes != expected:
        warnings.append(f"spec.command: --nnodes={nnodes} contradicts the spec ({expected})")
    for flag in _PINNED:
        if command.flag(flag) is not None:
            warnings.append(f"spec.command: {flag} is fixed in the command; the operator sets it per pod "
                            "(PET_* variables): remove it")
    if command.flag("--standalone") is not None and (spec.nodes > 1 or spec.elastic):
        warnings.append("spec.command: --standalone in a multi-node job: each pod starts its own single-node "
                        "rendezvous and waits for nodes that never join; remove it")
    return warnings
