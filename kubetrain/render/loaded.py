"""Render a loaded spec file: read its code directory (the only I/O), re-check an overridden target, render.

The one implementation behind `kubetrain render`/`submit`/`run`, kubetrain.api.render, the submit pipeline
and the controller (which passes the code it read from the cluster's ConfigMap instead of a directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubetrain.errors import Problem, RejectedRender, SpecError
from kubetrain.jobspec.checks import spec_problems
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.render import RenderOptions, render_job
from kubetrain.render.code import CodeBundle, collect_code
from kubetrain.render.origin import traced_problems


def render_loaded(loaded: LoadedSpec, *, target: str | None = None, namespace: str | None = None,
                  image: str | None = None, cloud: str | None = None, code: CodeBundle | None = None,
                  checkpoint_dir: str | None = None, gpu_via: str | None = None,
                  skip: tuple[Path, ...] = (), cluster: str | None = None) -> list[dict[str, Any]]:
    """`code`: the job's code, already collected (the controller's); None reads `spec.code.path`.
    `cluster`: the cluster's name, for spec.tracking (the run's kubetrain.cluster tag and its key).
    `checkpoint_dir`: the controller's directory for a recreated child (RenderOptions.checkpoint_dir).
    `skip`: directories under spec.code.path that are never code (render's --out)."""
    if target and target != loaded.job.spec.target:
        check_target(loaded, target)
    if code is None and loaded.job.spec.code:
        code_dir = (loaded.base_dir / loaded.job.spec.code.path).resolve()
        code = collect_code(code_dir, loaded.job.spec.code.exclude, include=loaded.job.spec.code.include, skip=skip)
    options = RenderOptions(code=code, cloud=cloud, image=image, namespace=namespace, checkpoint_dir=checkpoint_dir,
                            gpu_via=gpu_via, cluster=cluster)
    try:
        return render_job(loaded.job, options, target=target)
    except RejectedRender as exc:
        problems = traced_problems(exc, loaded)
        if problems:
            raise SpecError(problems) from None
        raise


def check_target(loaded: LoadedSpec, target: str) -> None:
    """Re-run the spec's cross-field checks for an overridden target (e.g. `--target trainjob`)."""
    problems = spec_problems(loaded.job, target)
    if problems:
        raise SpecError([Problem(field, f"{message} (--target {target})", loaded.source)
                         for field, message in problems])
