"""kubetrain cluster create / delete."""

from __future__ import annotations

import shlex

import click

from kubetrain.cli.output import handle_errors
from kubetrain.errors import UsageError
from kubetrain.kind import CreateOptions, create_cluster, delete_cluster, format_summary
from kubetrain.kind.config import check_name, parse_gpus
from kubetrain.kind.steps import TRAINING_OPERATOR_KUSTOMIZE

DEFAULT_NAME = "kubetrain"


@click.group()
def cluster() -> None:
    """Create or delete a local kind cluster with NVIDIA GPUs.

    \b
    Examples:
      kubetrain cluster create
      kubetrain cluster create --gpus 0,1      # two workers, one GPU each
      kubetrain cluster create --cpu-only      # laptops and CI
      kubetrain cluster delete
    """


@cluster.command()
@click.option("--name", default=DEFAULT_NAME, show_default=True, help="kind cluster name (context kind-NAME)")
@click.option("--gpus", default="all", show_default=True, metavar="all|0,1",
              help="'all': one worker with every GPU; indexes: one worker per listed GPU.")
@click.option("--cpu-only", is_flag=True, help="No GPUs: skip the NVIDIA checks, toolkit and device plugin.")
@click.option("--node-image", default=None, metavar="IMAGE", help="kindest/node image (default: kind's own).")
@click.option("--timeout", default=600, show_default=True, type=click.IntRange(min=1),
              help="Seconds to wait for the GPUs to become allocatable.")
@click.option("--operator-manifests", default=TRAINING_OPERATOR_KUSTOMIZE, metavar="DIR|URL",
              help="The training-operator's standalone kustomize overlay: a local copy for hosts without "
                   "GitHub access (default: the release on GitHub).")
@handle_errors
def create(name: str, gpus: str, cpu_only: bool, node_image: str | None, timeout: int,
           operator_manifests: str) -> None:
    """Create a kind cluster with GPUs (the NVIDIA way) and the Kubeflow training-operator.

    Checks the host first (nvidia-smi, docker's nvidia runtime, nvidia-ctk's volume-mount setting,
    kind, kubectl, helm). Every step checks before it acts, so re-running create on an existing
    cluster repairs only what is missing. Progress goes to stderr; the summary to stdout.

    \b
    Examples:
      kubetrain cluster create
      kubetrain cluster create --name dev --gpus 0,1
      kubetrain cluster create --cpu-only
    """
    if cpu_only and gpus != "all":
        raise UsageError("--gpus and --cpu-only exclude each other")
    rerun = ["kubetrain", "cluster", "create", "--name", name]
    rerun += ["--cpu-only"] if cpu_only else (["--gpus", gpus] if gpus != "all" else [])
    options = CreateOptions(name=check_name(name), gpus=None if cpu_only else parse_gpus(gpus),
                            cpu_only=cpu_only, node_image=node_image, timeout=float(timeout),
                            rerun=shlex.join(rerun), operator_manifests=operator_manifests)
    click.echo(format_summary(create_cluster(options)), nl=False)


@cluster.command()
@click.option("--name", default=DEFAULT_NAME, show_default=True, help="kind cluster name.")
@handle_errors
def delete(name: str) -> None:
    """Delete the kind cluster (nothing to do if it does not exist).

    \b
    Examples:
      kubetrain cluster delete
      kubetrain cluster delete --name dev
    """
    delete_cluster(check_name(name))
