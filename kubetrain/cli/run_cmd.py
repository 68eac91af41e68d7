"""kubetrain run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.output import handle_errors, info, warn
from kubetrain.local import RunOptions, parse_env_file
from kubetrain.local.endings import oom_killed_since, oom_kills
from kubetrain.local.hangwatch import supervise
from kubetrain.local.prepare import prepare_run
from kubetrain.metrics import EXIT_DIVERGED
from kubetrain.observe.archive import NodeArchive
from kubetrain.observe.render import LineStream, Renderer

if TYPE_CHECKING:
    from kubetrain.local.endings import RankFailure


@click.command()
@spec_file_option
@click.option("--env-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="KEY=VALUE file with values for spec.secretEnv (else they come from the environment).")
@click.option("--volume", "volumes", multiple=True, metavar="NAME=DIR",
              help="Use DIR for the spec's volume NAME (default: its localPath). Repeatable.")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Override spec.nodes.")
@click.option("--procs-per-node", type=click.IntRange(min=1), default=None,
              help="Override spec.procsPerNode.")
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Rendezvous port on 127.0.0.1 (default: a free one).")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also keep each rank's stdout/stderr in files under DIR (torchrun --log-dir).")
@click.option("--dry-run", is_flag=True,
              help="Print the commands and environment (secrets redacted); run nothing.")
@click.option("--raw", is_flag=True, help="Also print the KUBETRAIN_METRICS {json} lines on stdout.")
@handle_errors
def run(*, filename: str, env_file: Path | None, volumes: tuple[str, ...], nodes: int | None,
        procs_per_node: int | None, port: int, log_dir: Path | None, dry_run: bool, raw: bool) -> None:
    """Run the job on this machine with torchrun (no cluster).

    Starts one torchrun agent per node (nodes x procsPerNode processes, c10d rendezvous on
    127.0.0.1), each running exactly what the cluster manifests run. Volumes become local
    directories, secretEnv values come from --env-file or the environment (never printed).
    The job's merged logs go to stdout as `[node-N rank-R] ...`; its metrics become a live progress
    line on a terminal (else a progress line every 10 s on stderr) and a summary table at the end
    (the JSON metrics lines only with --raw, or in --log-dir's files). The exit status is the job's
    (128+signal if stopped by Ctrl-C/SIGTERM, after the runtime's checkpoint; 65 if the loss became NaN
    or infinite, spec.divergence).

    \b
    Examples:
      kubetrain run -f examples/digits/kubetrain.yaml
      kubetrain run --env-file .env --volume ckpt=./ckpt
      kubetrain run --nodes 1 --dry-run
    """
    loaded = load(filename)
    secrets = parse_env_file(env_file) if env_file else {}
    plan = prepare_run(loaded, RunOptions(secrets, list(volumes), nodes, procs_per_node, port, log_dir, dry_run), warn)
    if dry_run:
        click.echo("\n".join(plan.describe()))
        return
    mapping = ", ".join(f"{mount} -> {local}" for mount, local in plan.path_map.mounts)
    info(f"kubetrain run: {plan.job_name}: {len(plan.nodes)} node(s) x {plan.procs_per_node} process(es)"
         + (f"; {mapping}" if mapping else ""))
    archive = plan.path_map.rewrite(loaded.job.spec.archive) if loaded.job.spec.archive else None
    # the Trainer API stops itself (spec.divergence); a plain script is stopped from its metrics lines
    stops = loaded.job.spec.train is None and loaded.job.spec.divergence.policy == "stop"
    oom_before = oom_kills()
    code, failures, first, diverged = _supervise(plan, raw, archive, loaded.job.spec.hang, stops)
    code = EXIT_DIVERGED if diverged and code < 128 else code  # a signal from the user still wins
    for line in failures:
        info(f"kubetrain run: {line}")
    if failures and log_dir is None:
        info("kubetrain run: rerun with --log-dir DIR to keep each rank's output in a file")
    first = first if code and not (diverged and code == EXIT_DIVERGED) else None
    oom_killed = first is not None and oom_killed_since(oom_before)
    tail = first.tail() if first else []
    info(f"kubetrain run: {plan.job_name} {ending(code, diverged, first, oom_killed)}"
         + ("; its last log lines:" if tail else ""))
    for line in tail:
        info(f"    {line}")
    profile = loaded.job.spec.train.profile if loaded.job.spec.train else None
    if profile is not None:
        traces = plan.path_map.rewrite(profile.dir)
        info(f"kubetrain run: profiler traces and summaries in {traces}/rank-*/ (open with `tensorboard "
             f"--logdir {traces}` or a .pt.trace.json in https://ui.perfetto.dev)")
    if code:
        sys.exit(code)



STOPPED = {130: "stopped by SIGINT", 137: "killed by SIGKILL", 143: "stopped by SIGTERM",
           144: "the stop checkpoint did not finish within spec.checkpoint.sigtermTimeoutSeconds"}


def ending(code: int, diverged: str | None, first: RankFailure | None = None, oom_killed: bool = False) -> str:
    """How the run ended, with its cause: `succeeded`, `diverged at step 8: loss nan; exit code 65`,
    `exited with 143 (stopped by SIGTERM)`, `exited with 1: node-2 rank 1 ran out of disk space (ENOSPC...)`
    (`first`: the first failed rank, kubetrain.local.endings)."""
    if diverged and code == EXIT_DIVERGED:
        return f"{diverged}; exit code {code}"
    if code == 0:
        return "succeeded"
    if first is not None:
        return f"exited with {code}: node-{first.node} rank {first.rank} {first.cause(oom_killed)}"
    cause = "; ".join(c for c in (STOPPED.get(code), diverged) if c)
    return f"exited with {code}" + (f" ({cause})" if cause else "")


def _supervise(plan: Any, raw: bool, archive: str | None, hang: Any, stops: bool
               ) -> tuple[int, list[str], RankFailure | None, str | None]:
    """Run the plan with its output through the progress renderer (kubetrain.observe.render) and, with
    spec.archive, into the archive (one log per node, as a cluster keeps one per pod). `stops`: stop the job
    when its metrics show a non-finite loss. Returns the exit status, the failed ranks (one line each), the first
    failed rank and the divergence."""
    renderer = Renderer(sys.stdout, sys.stderr, raw=raw)
    kept = NodeArchive(archive, plan.job_name, renderer.line) if archive else None
    out = LineStream(kept.line) if kept else renderer.stdout
    try:
        code, failures, first = supervise(plan, hang, out, renderer.stderr,  # type: ignore[arg-type]
                                          renderer.tracker.divergence if stops else None)
    finally:
        renderer.close()
        if kept:
            kept.close()
            renderer.notice(f"kubetrain run: logs archived in {archive}/{plan.job_name}/logs/")
    return code, failures, first, renderer.tracker.divergence()
