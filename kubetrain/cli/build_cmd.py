"""kubetrain build."""

from __future__ import annotations

import click

from kubetrain.cli.common import load, spec_file_option
from kubetrain.cli.output import emit, handle_errors, info
from kubetrain.imagebuild import build_context, build_image
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
@click.option("--dry-run", is_flag=True,
              help="List the files of the build context on stdout (what was left out, and why, on stderr); "
                   "build nothing.")
@handle_errors
def build(filename: str, push: bool, kind_cluster: str | None, containerd: str | None, builder: str | None,
          dry_run: bool) -> None:
    """Build (and push or kind-load) the training image.

    The tag is a hash of everything that goes into the image (context files after .dockerignore,
    Dockerfile, build args, base image), so the same inputs give the same tag and a build whose tag
    already exists is skipped. stdout carries only the image reference; builder output goes to stderr.

    The context is chosen by the same rule as the code ConfigMap: kubetrain's defaults, .gitignore,
    .dockerignore and .kubetrainignore; a file that looks like a secret (.env, a private key...) is
    refused by name unless `!path` in .kubetrainignore ships it on purpose (docs/images.md).

    \b
    Examples:
      kubetrain build
      kubetrain build --dry-run
      kubetrain build --push
      kubetrain build --kind kubetrain --builder podman
      kubetrain build --builder podman --containerd /run/containerd/containerd.sock
      kubetrain render --image "$(kubetrain build --kind kubetrain)" | kubectl apply -f -
    """
    if dry_run:
        selection = build_context(load(filename))
        emit("".join(f"{entry.path}{'/' if entry.kind == 'dir' else ''}\n" for entry in selection.entries))
        if selection.left_out:
            info(f"left out: {selection.left_out_summary(limit=len(selection.left_out))}")
        return
    click.echo(build_image(load(filename), push=push, kind_cluster=kind_cluster, builder=builder,
                           containerd=containerd))
