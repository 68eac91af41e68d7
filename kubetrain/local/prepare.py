"""What `kubetrain run` and kubetrain.api.run do before anything starts, composed once: the plan, the render
warnings that apply to a local run (the launcher's; placement does not apply here), this machine's GPU and
CPU checks, then (unless a dry run) a --port that is free, torch, the Trainer API's references and the
program. Warnings go to `warn`; a failed check is a UsageError, a missing reference a SpecError."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from kubetrain.checks import WARN, failed
from kubetrain.errors import UsageError
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.local.plan import RunOptions, RunPlan, build_plan
from kubetrain.local.preflight import check_port, check_program, check_refs, machine_checks, require_torch
from kubetrain.render import RenderOptions, render_warnings

LOCAL = RenderOptions(cloud="local")  # no cloud profile resolves for a local run: only the launcher's warnings


def prepare_run(loaded: LoadedSpec, options: RunOptions, warn: Callable[[str], None], *, dev: Path | None = None,
                environ: Mapping[str, str] = os.environ) -> RunPlan:
    """The checked plan of a local run (see the module's docstring)."""
    plan = build_plan(loaded, options)
    for message in render_warnings(loaded.job, LOCAL):
        warn(loaded.where(message))
    checks = machine_checks(plan, loaded.job.spec.gpusPerNode, dev, environ)
    for check in checks:
        if check.status == WARN:
            warn(check.message)
    if refused := failed(checks):
        raise UsageError(refused[0].message)
    if not options.dry_run:
        check_port(options.port)
        require_torch()
        check_refs(plan)
        check_program(plan)
    return plan
