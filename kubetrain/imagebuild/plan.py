"""From a spec's `build` section to a staged context, a Dockerfile, build args and a content-hash tag."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import kubetrain
from kubetrain.errors import BuildError
from kubetrain.imagebuild import toolchain
from kubetrain.imagebuild.context import Entry, collect, content_hash, stage, write_file
from kubetrain.imagebuild.dockerignore import PatternMatcher
from kubetrain.imagebuild.reference import hash_tag, repository_error, split_reference
from kubetrain.imagebuild.selection import Selection, select
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.jobspec.model import JobSpec
from kubetrain.jobspec.sections import Build
from kubetrain.objectstore import backend_requirements

DOCKERFILES = {"cuda": "Dockerfile", "cpu": "Dockerfile.cpu"}
RUNTIME_FILES = ("ensure-torch.sh", "runtime-requirements.txt")
BUILD_ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PACKAGE_IGNORES = ("**/__pycache__", "**/*.pyc", "_images", "_manifests")


def images_dir() -> Path:
    """Dockerfiles ship in the wheel as kubetrain/_images; a source checkout uses ./images."""
    packaged = Path(kubetrain.__file__).resolve().parent / "_images"
    return packaged if packaged.is_dir() else Path(kubetrain.__file__).resolve().parent.parent / "images"


@dataclass(frozen=True)
class BuildPlan:
    """Everything `kubetrain build` needs, resolved and validated; no file has been read yet."""

    source: str  # the spec file, for messages
    context: Path
    dockerfile: Path
    own_dockerfile: bool  # kubetrain's images/Dockerfile[.cpu] rather than the user's
    repository: str
    build_args: dict[str, str] = field(default_factory=dict)
    base_image: str | None = None
    platform: str | None = None
    requirements: Path | None = None
    object_stores: tuple[str, ...] = ()  # fsspec backends the job's checkpoint.dir / archive URLs need
    trackers: tuple[str, ...] = ()  # the clients of spec.tracking's trackers that the runtime logs to
    notes: tuple[str, ...] = ()  # what planning changed (a devel base for torch.compile), said on stderr


@dataclass(frozen=True)
class Assembled:
    """A staged context ready for a builder, and the image reference its content hash names."""

    context: Path
    dockerfile: Path
    digest: str
    ref: str
    files: int
    left_out: Selection  # the user's files: what went in, and what was left out and why


def plan_build(loaded: LoadedSpec) -> BuildPlan:
    spec = loaded.job.spec
    build = spec.build or Build()
    context = (loaded.base_dir / build.context).resolve()
    if not context.is_dir():
        raise _field_error(loaded, "context", f"{context} is not a directory")
    own = build.dockerfile is None
    dockerfile = images_dir() / DOCKERFILES[build.variant] if own else context / str(build.dockerfile)
    if not dockerfile.is_file():
        raise _field_error(loaded, "dockerfile", f"{dockerfile} not found")
    return _toolchain(loaded, build, BuildPlan(
        source=loaded.source, context=context, dockerfile=dockerfile, own_dockerfile=own,
        repository=_repository(loaded, build), build_args=_build_args(loaded, build),
        base_image=build.baseImage, platform=build.platform,
        requirements=_requirements(loaded, build, context),
        object_stores=tuple(backend_requirements([spec.checkpoint.dir if spec.checkpoint else None, spec.archive])),
        trackers=tracker_requirements(spec),
    ))


# the same pins as the extras kubetrain[mlflow], kubetrain[wandb] and kubetrain[tensorboard] (pyproject.toml)
TRACKER_REQUIREMENTS = {"mlflow": "mlflow-skinny>=3.0", "wandb": "wandb>=0.31,<0.32",
                        "tensorboard": "tensorboard>=2.16"}


def tracker_requirements(spec: JobSpec) -> tuple[str, ...]:
    """What the runtime needs for the trackers the spec sets."""
    tracking = spec.tracking
    if tracking is None:
        return ()
    return tuple(req for name, req in TRACKER_REQUIREMENTS.items() if getattr(tracking, name) is not None)


_TOOLS = {"compiler": "C compiler", "nvcc": "nvcc (CUDA toolkit)"}


def _toolchain(loaded: LoadedSpec, build: Build, plan: BuildPlan) -> BuildPlan:
    """The plan on a base that has the compilers the spec needs: kubetrain's default base becomes its devel
    (or full) variant; a base or Dockerfile the user chose is refused, naming the image to use instead."""
    train = loaded.job.spec.train
    requirements = _read(plan.requirements).decode(errors="replace") if plan.requirements else ""
    wanted = toolchain.needs(bool(train and train.compile), requirements)
    if plan.own_dockerfile and build.variant == "cpu":
        wanted = [need for need in wanted if need.what == "compiler"]  # no CUDA ops to build on a CPU image
    if not wanted:
        return plan
    text = _read(plan.dockerfile).decode(errors="replace")
    base = toolchain.base_image(text, plan.build_args)
    missing = [n for n in wanted if base and toolchain.lacks(base, n.what) and not toolchain.installs(text, n.what)]
    if base is None or not missing:
        return plan
    lacking = " and ".join(sorted({_TOOLS[n.what] for n in missing}))
    why = "; ".join(n.why for n in missing)
    better = toolchain.has_variant(base)
    if plan.own_dockerfile and "BASE_IMAGE" not in plan.build_args and better:
        note = f"{base} has no {lacking}: {why}; building on {better} instead (larger, but it has them)"
        return replace(plan, build_args={**plan.build_args, "BASE_IMAGE": better}, base_image=better,
                       notes=(*plan.notes, note))
    field_name = ("spec.build.dockerfile" if not plan.own_dockerfile else
                  "spec.build.baseImage" if build.baseImage else "spec.build.buildArgs.BASE_IMAGE")
    instead = f"use {better}" if better else "use a -devel CUDA base"
    raise BuildError(f"{loaded.source}: {field_name}: {base} has no {lacking}: {why}; {instead}, or install it "
                     "in your Dockerfile (apt-get install build-essential; cuda-nvcc for nvcc)")


def _repository(loaded: LoadedSpec, build: Build) -> str:
    field_name = "build.repository" if build.repository else "image"
    repository = build.repository or split_reference(loaded.job.spec.image)[0]
    error = repository_error(repository)
    if error:
        raise BuildError(f"{loaded.source}: spec.{field_name}: {error}")
    return repository


def _build_args(loaded: LoadedSpec, build: Build) -> dict[str, str]:
    args = {"BASE_IMAGE": build.baseImage} if build.baseImage else {}
    for key, value in build.buildArgs.items():
        if not BUILD_ARG_NAME.match(key):
            raise _field_error(loaded, f"buildArgs.{key}",
                               "not a valid build-arg name ([A-Za-z_][A-Za-z0-9_]*)")
        args[key] = value
    return args


def _requirements(loaded: LoadedSpec, build: Build, context: Path) -> Path | None:
    if build.requirements is None:
        default = context / "requirements.txt"
        return default if default.is_file() else None
    path = (context / build.requirements).resolve()
    if not path.is_file():
        raise _field_error(loaded, "requirements", f"{path} not found")
    return path


def _field_error(loaded: LoadedSpec, name: str, message: str) -> BuildError:
    return BuildError(f"{loaded.source}: spec.build.{name}: {message}")


def assemble(plan: BuildPlan, staging: Path, base_id: str | None = None,
             selection: Selection | None = None) -> Assembled:
    """Stage the context under `staging/context` (+ `staging/Dockerfile`) and compute the tag. `base_id` is
    the base image's local ID when known: a base rebuilt under the same name then changes the tag."""
    context_dir = staging / "context"
    context_dir.mkdir(parents=True)
    selection = selection or select_context(plan)
    if plan.own_dockerfile:
        entries = _own_layout(plan, selection, context_dir)
    else:
        entries = selection.entries
        stage(entries, context_dir)
    dockerfile_bytes = _read(plan.dockerfile)
    dockerfile = staging / "Dockerfile"
    dockerfile.write_bytes(dockerfile_bytes)
    digest = content_hash(entries, [
        ("dockerfile", dockerfile_bytes),
        ("build-args", json.dumps(plan.build_args, sort_keys=True).encode()),
        ("base-image", f"{plan.base_image or ''}@{base_id or ''}".encode()),
        ("platform", (plan.platform or "").encode()),
    ])
    return Assembled(context_dir, dockerfile, digest, f"{plan.repository}:{hash_tag(digest)}", len(entries),
                     selection)


def select_context(plan: BuildPlan) -> Selection:
    """The user's files that go into the image, by the one rule of kubetrain.imagebuild.selection (the code
    ConfigMap's too); raises SecretRefused for a secret-looking file among them."""
    return select(plan.context, None if plan.own_dockerfile else plan.dockerfile)


def _own_layout(plan: BuildPlan, selection: Selection, dest: Path) -> list[Entry]:
    """kubetrain/ (runtime, requirements) and workspace/ (the user's context) for kubetrain's Dockerfile."""
    user = [replace(entry, path="workspace/" + entry.path) for entry in selection.entries]
    package_root = Path(kubetrain.__file__).resolve().parent
    runtime = collect(package_root, PatternMatcher(list(PACKAGE_IGNORES)), prefix="kubetrain/src/kubetrain/")
    stage(user + runtime, dest)
    (dest / "workspace").mkdir(exist_ok=True)  # COPY workspace/ needs it even for an empty context
    generated = [write_file(dest, f"kubetrain/{name}", _runtime_file(name, plan), name.endswith(".sh"))
                 for name in RUNTIME_FILES]
    requirements = _read(plan.requirements) if plan.requirements else b""
    generated.append(write_file(dest, "kubetrain/requirements.txt", requirements))
    return sorted(user + runtime + generated, key=lambda e: e.path)


def _runtime_file(name: str, plan: BuildPlan) -> bytes:
    """images/<name>; the runtime's requirements gain the object-store backends the job's URLs need (s3fs
    for `checkpoint.dir: s3://…`), so the pod does not fail at start on a missing package."""
    data = _read(images_dir() / name)
    if name == "runtime-requirements.txt" and plan.object_stores:
        lines = "".join(f"{req}\n" for req in plan.object_stores)
        data += f"# object stores used by the job (spec.checkpoint.dir / spec.archive)\n{lines}".encode()
    if name == "runtime-requirements.txt" and plan.trackers:
        lines = "".join(f"{req}\n" for req in plan.trackers)
        data += f"# experiment trackers the runtime logs to (spec.tracking)\n{lines}".encode()
    return data


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BuildError(f"{path}: cannot read: {exc.strerror}") from None
