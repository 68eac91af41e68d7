"""kubetrain build."""

from __future__ import annotations

import click

from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.output import handle_errors
from kubetrain.imagebuild import build_image
from kubetrain.imagebuild.builders import BUILDERS


@click.command()
@spec_file_option
@click.option("--push", is_flag=True, help="Push the image to its registry (skipped if the tag is there).")
@click.option("--kind", "kind_cluster", default=None, metavar="CLUSTER",
              help="Load the image into this kind cluster's nodes (kind load).")
@click.option("--containerd", "containerd", default=None, metavar="SOCKET",
              help="Load the image into the containerd at this socket (namespace k8s.io, the kubelet's).")
@click.option("--builder", type=click.Choice(BUILDERS), default=None,
              help="Builder to use (default: the first of docker, podman, nerdctl, buildah that works).")
@handle_errors
def build(filename: str, push: bool, kind_cluster: str | None, containerd: str | None, builder: str | None) -> None:
    """Build (and push or kind-load) the training image.

    The tag is a hash of everything that goes into the image (context files after .dockerignore,
    Dockerfile, build args, base image), so the same inputs give the same tag and a build whose tag
    already exists is skipped. stdout carries only the image reference; builder output goes to stderr.

    \b
    Examples:
      kubetrain build
      kubetrain build --push
      kubetrain build --kind kubetrain --builder podman
      kubetrain build --builder podman --containerd /run/containerd/containerd.sock
      kubetrain render --image "$(kubetrain build --kind kubetrain)" | kubectl apply -f -
    """
    click.echo(build_image(load(filename), push=push, kind_cluster=kind_cluster, builder=builder,
                           containerd=containerd))
