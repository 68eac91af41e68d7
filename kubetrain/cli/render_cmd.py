"""kubetrain render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kubetrain.cli.common import load, namespace_option, render_loaded, spec_file_option, warn_render, write_atomically
from kubetrain.cli.output import emit, handle_errors, info
from kubetrain.errors import UsageError
from kubetrain.render.yamlout import dump_json, dump_yaml


@click.command()
@spec_file_option
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Output format.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one file per object and a kustomization.yaml into DIR instead of stdout.")
@click.option("--target", type=click.Choice(["pytorchjob", "trainjob"]), default=None,
              help="Override spec.target.")
@click.option("--image", default=None, help="Override spec.image (e.g. the tag `kubetrain build` printed).")
@namespace_option
@handle_errors
def render(filename: str, output: str, out_dir: Path | None, target: str | None, image: str | None,
           namespace: str | None) -> None:
    """Render the job spec into Kubernetes manifests.

    stdout carries only the manifests, so the output can be piped straight to kubectl.

    \b
    Examples:
      kubetrain render | kubectl apply --server-side -f -
      kubetrain render -f job.yaml --target trainjob -o json
      kubetrain render --out deploy/ && kubectl apply -k deploy/
    """
    loaded = load(filename)
    objects = render_loaded(loaded, target=target, namespace=namespace, image=image)
    warn_render(loaded)
    if out_dir is None:
        emit(dump_yaml(objects) if output == "yaml" else dump_json(objects))
        return
    _write_dir(out_dir, objects, output)


def _write_dir(out_dir: Path, objects: list[dict[str, Any]], output: str) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot create: {exc.strerror}") from None
    files = []
    for obj in objects:
        name = f"{obj['kind'].lower()}-{obj['metadata']['name']}.{output}"
        text = dump_yaml([obj]) if output == "yaml" else dump_json([obj])
        write_atomically(out_dir / name, text)
        files.append(name)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": files}
    write_atomically(out_dir / "kustomization.yaml", dump_yaml([kustomization]))
    for name in [*files, "kustomization.yaml"]:
        click.echo(str(out_dir / name))
    info(f"wrote {len(files)} object(s) and kustomization.yaml to {out_dir}")
