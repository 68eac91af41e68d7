"""kubetrain doctor."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from kubetrain.checks import check_lines
from kubetrain.cli.cluster_opts import cluster_options, connect_from
from kubetrain.cli.output import handle_errors

if TYPE_CHECKING:
    from kubetrain.cluster.doctor import Report


@click.command()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@click.option("--cpu", is_flag=True, help="Check for CPU training: no GPU or device plugin is needed.")
@cluster_options
@handle_errors
def doctor(output: str, cpu: bool, context: str | None, kubeconfig: str | None, namespace: str | None,
        request_timeout: float | None) -> None:
    """Check a cluster's readiness for GPU training.

    One line per check (✓ ok, ! warning, ✗ problem), each problem with a hint: server version, the
    training APIs and their operators, allocatable GPUs per node and the device plugin, GPU node labels
    and taints, the cloud profile placement.cloud: auto would use, Kueue/Volcano, and your RBAC in the
    namespace. Exits 1 if any check fails.

    \b
    Examples:
      kubetrain doctor
      kubetrain doctor --context prod-gke -n research
      kubetrain doctor --context kind-kubetrain --cpu   # a `cluster create --cpu-only` cluster
      kubetrain doctor -o json | jq '.checks[] | select(.status != "ok")'
    """
    # the verb's work loads when it runs: `kubetrain --help` and the other verbs stay fast (import budget)
    from kubetrain.cluster.doctor import run_doctor

    connection = connect_from(context, kubeconfig, request_timeout)
    report = run_doctor(connection, connection.namespace(namespace), cpu=cpu)
    if output == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
    else:
        _print(report, "CPU" if cpu else "GPU")
    if not report.ok:
        sys.exit(1)


def _print(report: Report, kind: str) -> None:
    color = sys.stdout.isatty()
    click.echo(f"kubetrain doctor: context {report.context or 'in-cluster'}, namespace {report.namespace}")
    for check in report.checks:
        for line in check_lines(check, aligned=True, color=color):
            click.echo(line)
    failed = sum(c.status == "fail" for c in report.checks)
    warned = sum(c.status == "warn" for c in report.checks)
    verdict = f"ready for {kind} training" if not failed else f"{failed} problem(s) to fix"
    click.echo(f"{verdict}; {warned} warning(s)", err=True)
