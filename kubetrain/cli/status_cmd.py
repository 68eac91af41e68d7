"""kubetrain status NAME, kubetrain list, kubetrain events NAME."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import click

from kubetrain.cli.cluster_opts import age, cluster_options, connect_from, print_table, target_option
from kubetrain.cli.output import handle_errors, info
from kubetrain.kube.parallel import start

if TYPE_CHECKING:
    from kubetrain.jobs.crud import JobSummary
    from kubetrain.jobs.stacks import JobStacks
    from kubetrain.jobs.status import EventRow, JobStatus

OUTPUT = click.Choice(["text", "json", "yaml"])


@click.command()
@click.argument("name")
@cluster_options
@click.option("-o", "--output", type=OUTPUT, default="text", show_default=True)
@click.option("--events", "recent", type=click.IntRange(min=0), default=10, show_default=True,
              help="How many recent Events to show.")
@click.option("--hang", "hang", is_flag=True,
              help="While the job runs, read its ranks' progress records (one exec per pod) for a hang line.")
@target_option
@handle_errors
def status(name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, output: str, recent: int, target: str | None, hang: bool) -> None:
    """Show a job's conditions, pods, recent Events and what they mean.

    \b
    Examples:
      kubetrain status llm-finetune
      kubetrain status llm-finetune -n team-a -o json
    """
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs.status import job_status
    from kubetrain.jobs.targets import TARGETS

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    # The hang read (one exec per pod) runs beside the status reads (rank 0's log head): a stuck kubelet
    # costs the command one deadline, not two.
    hanging = start(_hang_report, connection, ns, name, target) if hang and output == "text" else None
    result = job_status(connection.rest, [TARGETS[target]] if target else None, ns, name, recent,
                        timeline=output == "text")
    if output == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
    elif output == "yaml":
        click.echo(dump_yaml([result.as_dict()]), nl=False)
    else:
        _print_status(result)
        if hanging is not None and result.job.state == "Running":
            _print_hang(hanging.result())
        if result.timeline:  # where the time went; empty when fewer than two moments are known
            click.echo(f"\nTimeline: {result.timeline}")


def _hang_report(connection: Any, namespace: str, name: str, target: str | None) -> JobStacks:
    """The running pods' progress records (docs/hangs.md); nothing is signalled."""
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs import find_job
    from kubetrain.jobs.stacks import exec_records, job_stacks

    found, _ = find_job(connection.rest, namespace, name, target)
    return job_stacks(connection.rest, found, namespace, name, run=exec_records, asked=False)


def _print_hang(report: JobStacks) -> None:
    """The hang line, and the pods that could not be asked (a node down, a kubelet that did not answer)."""
    lines = (report.hang_lines() if report.has_ranks else []) + report.messages()
    if lines:
        click.echo("\nHang:")
        for line in lines:
            click.echo(f"  {line}")


def dump_yaml(items: list[dict[str, Any]]) -> str:
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.render.yamlout import dump_yaml as dump

    return dump(items)


def _print_status(result: JobStatus) -> None:
    job = result.job
    gpus = f"{job.pods}×{job.gpus_per_pod} GPU" if job.gpus_per_pod else f"{job.pods} pod(s), CPU"
    click.echo(f"{job.target} {job.namespace}/{job.name}: {job.state} ({gpus}, age {age(job.created)})")
    if result.progress and result.progress.get("line"):  # mirrored by the kubetrain controller
        click.echo(f"Progress: {result.progress['line']}")
    for tracker, url in sorted(((result.tracking or {}).get("runs") or {}).items()):
        click.echo(f"Run ({tracker}): {url}")
    click.echo("\nConditions:")
    rows = [[c.get("type", ""), c.get("status", ""), c.get("reason", ""), str(c.get("message", ""))]
            for c in result.conditions] or [["(none yet)", "", "", ""]]
    print_table(["TYPE", "STATUS", "REASON", "MESSAGE"], rows)
    click.echo("\nPods:")
    pod_rows = [[p.replica, p.name, p.phase, (p.node or "-") + (f" ({p.node_state})" if p.node_state else ""),
                 str(p.restarts) + (f" (+{p.recreated} re-created)" if p.recreated else ""), p.last_termination or "-"]
                for p in result.pods] or [["(no pods yet)", "", "", "", "", ""]]
    print_table(["REPLICA", "POD", "PHASE", "NODE", "RESTARTS", "LAST TERMINATION"], pod_rows)
    if result.events:
        click.echo("\nRecent events:")
        _print_events(result.events, with_hints=False)  # they are among the Hints below
    if result.hints:
        click.echo("\nHints:")
        for hint in result.hints:
            click.echo(f"  → {hint}")


def _print_events(events: list[EventRow], with_hints: bool = True) -> None:
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs.hints import shorten

    rows = []
    for event in events:
        count = f" (x{event.count})" if event.count > 1 else ""
        rows.append([age(event.time), event.type, event.reason, event.object, shorten(event.message) + count])
        rows += [["", "", "", "", f"→ {hint}"] for hint in event.hints if with_hints]
    print_table(["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows)


@click.command(name="list")
@cluster_options
@click.option("-A", "--all-namespaces", is_flag=True, help="List jobs in every namespace.")
@click.option("-o", "--output", type=click.Choice(["text", "wide", "json", "yaml"]), default="text",
              show_default=True, help="wide: also each job's tracked run (spec.tracking, kept by the controller).")
@handle_errors
def list_(context: str | None, kubeconfig: str | None, namespace: str | None, request_timeout: float | None,
          all_namespaces: bool, output: str) -> None:
    """List PyTorchJobs and TrainJobs with their state (Terminating while deleted) and size.

    \b
    Examples:
      kubetrain list
      kubetrain list -o wide
      kubetrain list -A -o json
    """
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs.crud import list_jobs
    from kubetrain.queues import workloads as queues

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = None if all_namespaces else connection.namespace(namespace)
    found = queues.annotate(connection.rest, list_jobs(connection.rest, None, ns), ns)
    if output not in ("text", "wide"):
        items = [s.as_dict() for s in found]
        click.echo(json.dumps(items, indent=2) if output == "json" else dump_yaml(items), nl=output == "json")
        return
    if not found:
        info(f"no jobs in {'any namespace' if ns is None else 'namespace ' + ns}")
        return
    headers = (["NAMESPACE"] if ns is None else []) + ["NAME", "TARGET", "STATE", "NODES×GPUS", "AGE"]
    grouped = _grouped(found)
    rows = [([s.namespace] if ns is None else []) + row for s, row in grouped]
    if output == "wide":
        # only -o wide loads the status machinery (import budget of `list`, docs/performance.md)
        from kubetrain.jobs.status import run_links

        links = run_links(connection.rest, ns)
        headers.append("RUN")
        for row, (job, _) in zip(rows, grouped, strict=True):
            row.append(links.get((job.namespace, job.trainingjob), "-"))
    print_table(headers, rows)


def _grouped(found: list[JobSummary]) -> list[tuple[JobSummary, list[str]]]:
    """One row per job, and one per sweep for all its trials (where its first trial would be)."""
    trials: dict[tuple[str, str], list[JobSummary]] = {}
    for job in found:
        if job.sweep:
            trials.setdefault((job.namespace, job.sweep), []).append(job)
    rows: list[tuple[JobSummary, list[str]]] = []
    for job in found:
        if not job.sweep:
            rows.append((job, [job.name, job.target, job.state + _kueue(job.kueue), f"{job.pods}×{job.gpus_per_pod}",
                               age(job.created)]))
        elif (group := trials.pop((job.namespace, job.sweep), None)) is not None:
            states = Counter(t.state for t in group)
            text = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
            rows.append((job, [f"sweep/{job.sweep}", job.target, f"{len(group)} trials: {text}",
                               f"{job.pods}×{job.gpus_per_pod}", age(job.created)]))
    return rows


def _kueue(state: str) -> str:
    return f" (Kueue: {state})" if state else ""


@click.command()
@click.argument("name")
@cluster_options
@click.option("-o", "--output", type=OUTPUT, default="text", show_default=True)
@target_option
@handle_errors
def events(name: str, context: str | None, kubeconfig: str | None, namespace: str | None,
           request_timeout: float | None, output: str, target: str | None) -> None:
    """Show the Events of a job and its pods, each with a hint when there is one.

    \b
    Examples:
      kubetrain events llm-finetune
      kubetrain events llm-finetune -n team-a -o json
    """
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from dataclasses import asdict

    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.jobs import find_job, pods
    from kubetrain.jobs.status import job_events

    connection = connect_from(context, kubeconfig, request_timeout)
    ns = connection.namespace(namespace)
    found, obj = find_job(connection.rest, ns, name, target)
    rows = job_events(connection.rest, found, ns, obj, pods.list_pods(connection.rest, found, ns, name))
    if output != "text":
        items = [asdict(e) for e in rows]
        click.echo(json.dumps(items, indent=2) if output == "json" else dump_yaml(items), nl=output == "json")
    elif rows:
        _print_events(rows)
    else:
        info(f"no events for {found.kind} {ns}/{name}")
