"""Render a job spec into Kubernetes objects with the jinja2 templates under `manifests/`.

`render_job` is a pure function: no network, no clock, no randomness. Templates build the structure;
every user-provided value enters through the `q`/`flow` filters, so it can never change that structure.
"""

from __future__ import annotations

import contextlib
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from kubetrain.cachedir import cache_dir
from kubetrain.errors import Problem, RejectedRender, RenderError, SpecError
from kubetrain.jobspec.checks import world_size_findings
from kubetrain.jobspec.model import TrainingJob
from kubetrain.render import dra
from kubetrain.render.code import configmap_payload
from kubetrain.render.context import RenderOptions, code_configmap_name, labels, template_context
from kubetrain.render.launch import launcher_problem, launcher_warnings
from kubetrain.render.yamlout import flow, quote
from kubetrain.rules import names
from kubetrain.rules.k8s.check import k8s_findings
from kubetrain.yamlsrc import MAX_OBJECT_BYTES, object_size_problem

__all__ = ["RenderOptions", "manifests_dir", "render_job", "render_warnings", "resolve_target"]

TEMPLATES = {"pytorchjob": "pytorchjob.yaml.j2", "trainjob": "trainjob.yaml.j2"}


def manifests_dir() -> Path:
    """Templates ship in the wheel as kubetrain/_manifests; a source checkout uses ./manifests."""
    packaged = Path(__file__).resolve().parent.parent / "_manifests"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent.parent / "manifests"


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Compiled templates under the user's cache: compiling them is most of a render's own time (~20 ms
    idle, against ~1 ms to load). jinja2 checks each entry against the template's source, so an edited
    template is compiled again; a cache that cannot be written costs only that time."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    directory = cache_dir() / "templates"
    if not directory.is_absolute():  # no home directory (a container's random UID): never a relative "~/"
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _CompiledTemplates(str(directory))


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(manifests_dir())),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["q"] = quote
    env.filters["flow"] = flow
    env.filters["secret_ref"] = lambda name: {"name": name}
    return env


def resolve_target(job: TrainingJob, target: str | None = None) -> str:
    """The manifest kind to render; `auto` means PyTorchJob offline (submit resolves it from the CRDs)."""
    chosen = target or job.spec.target
    return "pytorchjob" if chosen == "auto" else chosen


def render_job(job: TrainingJob, options: RenderOptions | None = None, target: str | None = None
               ) -> list[dict[str, Any]]:
    """The job's objects: the code ConfigMap (if any), then the PyTorchJob or TrainJob.

    Raises SpecError for overrides that the spec's own checks would refuse, a launcher that cannot run under
    torchrun, and RenderError for an object the apiserver or etcd would refuse for its size.
    """
    options = options or RenderOptions()
    _check_inputs(job, options)
    context = template_context(job, options)
    objects = []
    if job.spec.code and options.code is not None:
        objects.append(_render_configmap(job, options, context))
    kind = resolve_target(job, target)
    objects += _render_dra(job, context, kind)
    objects.append(_render_template(TEMPLATES[kind], context))
    for obj in objects:
        if problem := object_size_problem(obj):
            raise RenderError(f"{obj['kind']}/{obj['metadata']['name']}: {problem[1]}")
        _refuse_what_kubernetes_rejects(obj)
    return objects


def _refuse_what_kubernetes_rejects(obj: dict[str, Any]) -> None:
    """The last line of defence: Kubernetes' own object and pod rules (kubetrain/rules/k8s) on what was
    rendered. The spec's checks should have caught everything with its field and line; what they missed is
    raised with the refused values, which render_loaded traces back to the spec's field and line
    (kubetrain/render/origin.py). Never prints an object the cluster would refuse."""
    errors = [f for f in k8s_findings(obj) if f.severity == "error"]
    if errors:
        raise RejectedRender(f"{obj['kind']}/{obj['metadata']['name']}",
                             [(f.path, f.message, value_at(obj, f.path)) for f in errors])


def value_at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        try:
            obj = obj[part]
        except (KeyError, IndexError, TypeError):
            return None
    return obj


def render_warnings(job: TrainingJob, options: RenderOptions | None = None) -> list[str]:
    """What render does that the spec may not expect: contradicting launcher flags, an unresolved cloud, a sweep
    section left out."""
    warnings = launcher_warnings(job.spec)
    warnings += [f"{field}: {message}" for field, severity, message in world_size_findings(job)
                 if severity == "warning"]
    if job.spec.placement.cloud == "auto" and not (options and options.cloud):
        warnings.append("spec.placement.cloud: auto is resolved by `kubetrain submit` from the cluster's node "
                        "labels; offline, no cloud profile applies (no GPU-model selector, no cloud tolerations)")
    spec = job.spec
    if spec.gpu_via == "auto" and not (options and options.gpu_via):
        warnings.append("spec.gpus.via: auto is resolved by `kubetrain submit` from the cluster's DeviceClasses; "
                        "offline it renders the device plugin's nvidia.com/gpu limit")
    if spec.target == "trainjob" and spec.scheduling.queue and "terminationGracePeriodSeconds" in spec.model_fields_set:
        warnings.append("spec.terminationGracePeriodSeconds: not rendered for a TrainJob under Kueue (Kueue 0.19 "
                        "drops it on admission and the Trainer's JobSet update is then refused); the pods get the "
                        "ClusterTrainingRuntime's grace period (Kubernetes' default 30 s): set it there "
                        "(docs/queues.md)")
    if job.sweep is not None:
        warnings.append("sweep: left out: this is the spec as written, one job; `kubetrain sweep run` runs the "
                        "sweep's trials (docs/sweeps.md)")
    return warnings


def _check_inputs(job: TrainingJob, options: RenderOptions) -> None:
    """Command-line overrides get exactly the checks of the spec fields they replace."""
    problems = []
    if options.namespace is not None and (error := names.dns_label_error(options.namespace)):
        problems.append(Problem("--namespace", error))
    if options.image is not None and (error := names.image_error(options.image)):
        problems.append(Problem("--image", error))
    if refused := launcher_problem(job.spec.command):
        problems.append(Problem("spec.command", refused))
    if problems:
        raise SpecError(problems)
    size = len(job.model_dump_json(by_alias=True))
    if size > MAX_OBJECT_BYTES:  # every pod template repeats args and env: no need to render to know
        raise RenderError(f"the spec's values alone are {size / 2**20:.2f} MiB; etcd stores at most 1.5 MiB per "
                          "object (ship large data in a volume or the image, not in args or env)")


def _render_configmap(job: TrainingJob, options: RenderOptions, context: dict[str, Any]) -> dict[str, Any]:
    assert options.code is not None
    data, binary, _ = configmap_payload(options.code)
    cm_context = {"configmap_name": code_configmap_name(job, options.code), "namespace": context["namespace"],
                  "labels": labels(job), "data": data, "binary_data": binary}
    return _render_template("configmap.yaml.j2", cm_context)


def _render_dra(job: TrainingJob, context: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """With `gpus.via: dra`: a ResourceClaimTemplate per replica type (and for a TrainJob the TrainingRuntime
    whose pods claim it)."""
    if not context["gpu_claims"]:
        return []
    request = dra.device_request(job.spec)
    objects = [_render_template("resourceclaimtemplate.yaml.j2", {
        "template_name": dra.template_name(job.metadata.name, replica), "namespace": context["namespace"],
        "labels": context["labels"], "request": request}) for replica in dra.replica_types(job.spec, kind)]
    if kind == "trainjob":
        objects.append(_render_template("trainingruntime.yaml.j2", {
            **context, "runtime_labels": {**context["labels"], "trainer.kubeflow.org/framework": "torch"},
            "claims": context["pod_claims"]["node"]}))
    return objects


def _render_template(name: str, context: dict[str, Any]) -> dict[str, Any]:
    text = _environment().get_template(name).render(context)
    # Our own template's output: libyaml's loader (same resolver as SafeLoader) is ~10x faster than PyYAML's.
    loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    assert isinstance(loaded, dict), f"template {name} did not produce a mapping"
    return loaded
