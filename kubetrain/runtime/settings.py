"""The spec's training sections as the pod reads them: `train`, `checkpoint` and `divergence` of
KUBETRAIN_CONFIG, the JSON that `kubetrain render` and `run` write from the validated spec.

The spec's own models (kubetrain.jobspec.sections, pydantic) validate a spec where it is written; a pod reads
the result. These frozen dataclasses carry the same field names, defaults, choices and bounds, and
tests/runtime/test_settings.py fails when the two differ, so a spec and its pod cannot disagree on a field.
Reading them costs a pod no pydantic (about 170 ms of CPU before torch, docs/runtime.md). `read` checks what
a hand-written KUBETRAIN_CONFIG can get wrong, with errors that name the field (`spec.train.batchSize: ...`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from kubetrain.errors import KubetrainError

S = TypeVar("S")


class RuntimeConfigError(KubetrainError):
    """The runtime's configuration is unusable (bad KUBETRAIN_CONFIG, a factory that does not import...)."""

    exit_code = 2


def bound(ge: float | None = None, gt: float | None = None) -> dict[str, float]:
    """A numeric field's lower bound, as the spec's `Field(ge=...)` / `Field(gt=...)` says."""
    return {name: value for name, value in (("ge", ge), ("gt", gt)) if value is not None}


@dataclass(frozen=True)
class DDP:
    findUnusedParameters: bool = False
    staticGraph: bool = False
    gradientAsBucketView: bool = True
    bucketCapMb: float = field(default=25.0, metadata=bound(gt=0))


@dataclass(frozen=True)
class FSDP:
    wrapClasses: list[str] = field(default_factory=list)
    reshardAfterForward: bool = True
    cpuOffload: bool = False
    metaInit: bool = False
    asyncCheckpoint: bool = False


@dataclass(frozen=True)
class Profile:
    dir: str
    wait: int = field(default=1, metadata=bound(ge=0))
    warmup: int = field(default=1, metadata=bound(ge=0))
    active: int = field(default=3, metadata=bound(ge=1))
    repeat: int = field(default=1, metadata=bound(ge=0))
    ranks: list[int] = field(default_factory=lambda: [0], metadata=bound(ge=0))


@dataclass(frozen=True)
class Train:
    model: str
    dataset: str
    loss: str | None = None
    optimizer: str | None = None
    scheduler: str | None = None
    epochs: int = field(default=1, metadata=bound(ge=1))
    batchSize: int = field(default=32, metadata=bound(ge=1))
    lr: float = field(default=1e-3, metadata=bound(gt=0))
    seed: int = 0
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    gradAccumSteps: int = field(default=1, metadata=bound(ge=1))
    gradClip: float | None = field(default=None, metadata=bound(gt=0))
    compile: bool = False
    syncBatchNorm: bool = False
    activationCheckpointing: bool = False
    numWorkers: int = field(default=0, metadata=bound(ge=0))
    logEvery: int = field(default=10, metadata=bound(ge=1))
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    timeoutSeconds: int = field(default=1800, metadata=bound(ge=1))
    ddp: DDP = field(default_factory=DDP)
    strategy: Literal["ddp", "fsdp", "dp"] = "ddp"
    fsdp: FSDP = field(default_factory=FSDP)
    profile: Profile | None = None


@dataclass(frozen=True)
class Checkpoint:
    dir: str | None = None
    everySteps: int | None = field(default=None, metadata=bound(ge=1))
    keep: int = field(default=3, metadata=bound(ge=1))
    resume: bool = True
    sigtermTimeoutSeconds: int = field(default=25, metadata=bound(ge=1))
    ephemeral: bool = False


@dataclass(frozen=True)
class Divergence:
    policy: Literal["stop", "skip", "continue"] = "stop"
    maxSkippedSteps: int = field(default=10, metadata=bound(ge=1))


def read(cls: type[S], data: Any, where: str) -> S:
    """`data` (a JSON object) as a `cls`; a RuntimeConfigError names the first field that does not fit."""
    if not isinstance(data, dict):
        raise RuntimeConfigError(f"{where}: expected an object, got {_json_type(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown := sorted(set(data) - set(fields)):
        raise RuntimeConfigError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(fields)})")
    if missing := [name for name, f in fields.items() if name not in data and _required(f)]:
        raise RuntimeConfigError(f"{where}.{missing[0]}: required")
    hints = typing.get_type_hints(cls)
    values = {name: _value(hints[name], value, f"{where}.{name}", fields[name].metadata)
              for name, value in data.items()}
    return cls(**values)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _value(annotation: Any, value: Any, where: str, limits: typing.Mapping[str, float]) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (annotation,) = [a for a in args if a is not type(None)]
        return _value(annotation, value, where, limits)
    if origin is Literal:
        if value not in args:
            raise RuntimeConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise RuntimeConfigError(f"{where}: expected a list, got {_json_type(value)}")
        return [_value(args[0], item, f"{where}[{i}]", limits) for i, item in enumerate(value)]
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return read(annotation, value, where)
    return _scalar(annotation, value, where, limits)


def _scalar(kind: type, value: Any, where: str, limits: typing.Mapping[str, float]) -> Any:
    # JSON has one number type: 2 is a valid float, 2.0 not an int; a boolean is never a number
    fits = isinstance(value, kind) if kind is not float else isinstance(value, int | float)
    if not fits or (kind is not bool and isinstance(value, bool)):
        raise RuntimeConfigError(f"{where}: expected {_TYPE_NAMES.get(kind, kind.__name__)}, got {_json_type(value)}")
    if "ge" in limits and value < limits["ge"]:
        raise RuntimeConfigError(f"{where}: must be >= {limits['ge']:g}, got {value}")
    if "gt" in limits and value <= limits["gt"]:
        raise RuntimeConfigError(f"{where}: must be > {limits['gt']:g}, got {value}")
    return float(value) if kind is float else value


_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
            dict: "an object"}.get(type(value), type(value).__name__)


def as_settings(cls: type[S], section: Any, where: str) -> S:
    """A section given from Python: these settings as they are, or the spec's own model (a pydantic
    kubetrain.jobspec.sections object, validated where it was made) read into them."""
    if isinstance(section, cls):
        return section
    dump = getattr(section, "model_dump", None)
    if dump is None:
        raise RuntimeConfigError(f"{where}: expected kubetrain.runtime.settings.{cls.__name__} or the spec's "
                            f"{cls.__name__}, got {type(section).__name__}")
    return read(cls, dump(), where)
