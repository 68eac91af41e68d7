"""kubetrain render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kubetrain.cli.common import load, namespace_option, render_loaded, spec_file_option, warn_render
from kubetrain.cli.output import emit, handle_errors, info
from kubetrain.render.outdir import KUSTOMIZATION, write_out_dir
from kubetrain.render.yamlout import dump_json, dump_yaml


@click.command()
@spec_file_option
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Output format.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write one file per object and a kustomization.yaml into DIR instead of stdout; rendering "
                   "again changes no byte of an unchanged project and removes the files kubetrain no longer "
                   "writes (DIR/.kubetrain-render lists them). DIR is never shipped as code.")
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
    skip = (out_dir,) if out_dir is not None else ()
    objects = render_loaded(loaded, target=target, namespace=namespace, image=image, skip=skip)
    warn_render(loaded)
    if out_dir is None:
        emit(dump_yaml(objects) if output == "yaml" else dump_json(objects))
        return
    _write_dir(out_dir, objects, output)


def _write_dir(out_dir: Path, objects: list[dict[str, Any]], output: str) -> None:
    files = []
    for obj in objects:
        name = f"{obj['kind'].lower()}-{obj['metadata']['name']}.{output}"
        files.append((name, dump_yaml([obj]) if output == "yaml" else dump_json([obj])))
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [name for name, _ in files]}
    files.append((KUSTOMIZATION, dump_yaml([kustomization])))
    stale = write_out_dir(out_dir, files, str(out_dir))
    for name, _ in files:
        click.echo(str(out_dir / name))
    for name in stale:
        info(f"removed {out_dir / name} (kubetrain wrote it; this render does not)")
    info(f"wrote {len(files) - 1} object(s) and {KUSTOMIZATION} to {out_dir}")
