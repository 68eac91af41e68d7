"""kubetrain controller run|install|uninstall|crd: the operator (docs/operator.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from kubetrain.cli.cluster_opts import connect_from
from kubetrain.cli.output import emit_objects, handle_errors, info
from kubetrain.controller.crd import crd as make_crd
from kubetrain.controller.install import apply_all, delete_all, objects_for
from kubetrain.controller.loop import Settings
from kubetrain.controller.run import Election
from kubetrain.controller.run import run as run_controller
from kubetrain.render.yamlout import dump_json, dump_yaml

if TYPE_CHECKING:
    pass


@click.group()
def controller() -> None:
    """The TrainingJob operator: run it, install it, print its CRD.

    \b
    Examples:
      kubetrain controller install                 # CRD, RBAC and Deployment (kubetrain-system)
      kubetrain controller install --dry-run=client -o yaml > operator.yaml
      kubetrain controller run --kubeconfig ~/.kube/config --no-leader-elect
    """


@controller.command()
@click.option("--context", default=None, metavar="NAME", help="kubeconfig context to use.")
@click.option("--kubeconfig", default=None, metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, "
              "~/.kube/config, then in-cluster).")
@click.option("--watch-namespace", default=None, metavar="NS",
              help="Reconcile TrainingJobs of this namespace only (needs only a Role there).")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True,
              help="Elect a leader on a coordination.k8s.io Lease before reconciling.")
@click.option("--lease-namespace", default=None, metavar="NS",
              help="Namespace of the Lease (default: $POD_NAMESPACE, then kubetrain-system).")
@click.option("--lease-name", default="kubetrain-controller", show_default=True, metavar="NAME",
              help="Name of the Lease.")
@click.option("--lease-duration", type=click.FloatRange(min=2), default=15.0, show_default=True,
              metavar="SECONDS", help="How long a silent leader keeps the Lease.")
@click.option("--workers", type=click.IntRange(1, 64), default=16, show_default=True,
              help="Objects reconciled in parallel.")
@click.option("--update-policy", type=click.Choice(["report", "recreate", "continue"]), default="report",
              show_default=True, help="A spec change to an existing job: report it as a condition, recreate the "
              "child (a fresh start, checkpoints in a directory of its own), or recreate it to continue from the "
              "old child's checkpoints. "
              "The annotation kubetrain.dev/update-policy overrides it per object.")
@click.option("--progress-interval", type=click.FloatRange(min=0), default=30.0, show_default=True,
              metavar="SECONDS", help="Read each running job's rank-0 log tail this often (0: never).")
@click.option("--progress-tail", type=click.IntRange(1, 10000), default=200, show_default=True, metavar="LINES",
              help="Log lines read per progress read.")
@click.option("--hang-interval", type=click.FloatRange(min=0), default=30.0, show_default=True, metavar="SECONDS",
              help="Read each running job's rank progress records (one exec per running pod) this often for the "
              "Hung and Straggler conditions and spec.hang.policy (0: never).")
@click.option("--probe-address", default="127.0.0.1", show_default=True, metavar="IP",
              help="Address of /healthz, /readyz and /metrics: loopback by default; in a pod the one the kubelet "
              "and Prometheus reach (the Deployment passes the pod IP; 0.0.0.0: every interface).")
@click.option("--probe-port", type=click.IntRange(0, 65535), default=8081, show_default=True,
              help="Port of /healthz, /readyz and /metrics (0: any free port).")
@handle_errors
def run(context: str | None, kubeconfig: str | None, watch_namespace: str | None, leader_elect: bool,
        lease_namespace: str | None, lease_name: str, lease_duration: float, workers: int, update_policy: str,
        progress_interval: float, progress_tail: int, hang_interval: float, probe_address: str,
        probe_port: int) -> None:
    """Reconcile TrainingJobs until SIGTERM (exit 0) or a lost Lease (exit 1).

    \b
    Examples:
      kubetrain controller run                       # in the cluster (the Deployment)
      kubetrain controller run --no-leader-elect --watch-namespace ml
    """
    connection = connect_from(context, kubeconfig)
    settings = Settings(namespace=watch_namespace, workers=workers, update_policy=update_policy,
                        progress_interval=progress_interval, progress_tail=progress_tail, hang_interval=hang_interval)
    election = Election(lease_namespace or os.environ.get("POD_NAMESPACE") or "kubetrain-system", lease_name,
                        duration=lease_duration, enabled=leader_elect)
    sys.exit(run_controller(connection.rest, settings, election, probe_port, probe_address))


def _install_options(func: click.decorators.FC) -> click.decorators.FC:
    for option in reversed([
        click.option("--context", default=None, metavar="NAME", help="kubeconfig context to use."),
        click.option("--kubeconfig", default=None, metavar="FILE", help="kubeconfig file."),
        click.option("--namespaced", "watch_namespace", default=None, metavar="NS",
                     help="The namespace-scoped variant: a Role in NS instead of the ClusterRole (no CRD)."),
        click.option("--image", default=None, help="Controller image (default: the release's)."),
        click.option("--dry-run", "dry_run", type=click.Choice(["none", "client", "server"]), default="none",
                     is_flag=False, flag_value="client", show_default=True,
                     help="client (also a bare --dry-run, as in kubectl): print only, contact nothing; server: "
                     "dryRun=All."),
        click.option("-o", "--output", type=click.Choice(["name", "yaml", "json"]), default=None,
                     help="stdout: kind/name per object (default) or the objects."),
    ]):
        func = option(func)
    return func


def _objects(watch_namespace: str | None, image: str | None) -> list[dict[str, Any]]:
    return objects_for("namespaced" if watch_namespace else "cluster", image, watch_namespace)


@controller.command()
@_install_options
@handle_errors
def install(context: str | None, kubeconfig: str | None, watch_namespace: str | None, image: str | None,
            dry_run: str, output: str | None) -> None:
    """Apply the CRD, namespace, RBAC and Deployment (manifests/controller) with server-side apply.

    \b
    Examples:
      kubetrain controller install
      kubetrain controller install --image registry.example/kubetrain-controller:0.1.0
      kubetrain controller install --namespaced team-a       # Role in team-a, no ClusterRole
      kubetrain controller install --dry-run=client -o yaml  # print, contact nothing
    """
    _act(_objects(watch_namespace, image), apply_all, "installed", context, kubeconfig, dry_run, output)


def _act(objects: list[dict[str, Any]], action: Callable[..., list[str]], done: str, context: str | None,
         kubeconfig: str | None, dry_run: str, output: str | None) -> None:
    """Print (client dry run) or apply/delete the objects, then report them like kubectl does."""
    if dry_run == "client":
        emit_objects(objects, [f"{o['kind']}/{o['metadata']['name']}".lower() for o in objects], output)
        return
    names = action(connect_from(context, kubeconfig).rest, objects, dry_run=dry_run == "server")
    info(f"{done} {len(names)} objects" + (" (server dry run)" if dry_run == "server" else ""))
    emit_objects(objects, names, output)


@controller.command()
@_install_options
@click.option("--with-crd", is_flag=True, help="Also delete the CRD, and with it EVERY TrainingJob and child.")
@handle_errors
def uninstall(context: str | None, kubeconfig: str | None, watch_namespace: str | None, image: str | None,
              dry_run: str, output: str | None, with_crd: bool) -> None:
    """Delete what install applied. The CRD (and so every TrainingJob) stays unless --with-crd.

    \b
    Examples:
      kubetrain controller uninstall
      kubetrain controller uninstall --with-crd --dry-run=server
    """
    objects = [o for o in _objects(watch_namespace, image)
               if with_crd or o["kind"] != "CustomResourceDefinition"]
    _act(objects, delete_all, "deleted", context, kubeconfig, dry_run, output)


@controller.command()
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@handle_errors
def crd(output: str) -> None:
    """Print the TrainingJob CRD, generated from the spec model.

    \b
    Examples:
      kubetrain controller crd > trainingjobs.kubetrain.dev.yaml
      kubetrain controller crd -o json | jq '.items[0].spec.versions[0].additionalPrinterColumns'
    """
    if output == "json":
        click.echo(dump_json([make_crd()]), nl=False)
    else:
        click.echo(dump_yaml([make_crd()]), nl=False)
