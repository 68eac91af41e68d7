"""The runtime's configuration: KUBETRAIN_CONFIG (set by `kubetrain render` / `run`) and factory refs."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubetrain.podenv import CONFIG_ENV, PARAMS_ENV, PATH_MAP_ENV
from kubetrain.runtime.settings import Checkpoint, Divergence, RuntimeConfigError, Train, read

__all__ = ["RuntimeConfig", "RuntimeConfigError", "json_object", "load_config", "local_path", "path_map", "resolve_ref",
           "trial_params"]  # RuntimeConfigError lives in kubetrain.runtime.settings (its reader raises it)


@dataclass(frozen=True)
class RuntimeConfig:
    """What `python -m kubetrain.runtime` runs: the Trainer settings and the checkpoint settings."""

    train: Train | None
    checkpoint: Checkpoint
    divergence: Divergence = field(default_factory=Divergence)


def json_object(name: str, raw: str, expected: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in environment variable `name`, or a one-line RuntimeConfigError naming it."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RuntimeConfigError(f"{name}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RuntimeConfigError(f"{name}: expected {expected}")
    return data


def load_config(environ: Mapping[str, str] | None = None) -> RuntimeConfig:
    """Parse KUBETRAIN_CONFIG ({"train": ..., "checkpoint": ..., "divergence": ...}) into the runtime's
    settings (kubetrain.runtime.settings: the spec's sections as the pod reads them)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeConfigError(f"{CONFIG_ENV} is not set: run the Trainer API through `kubetrain run` or "
                                 "a rendered manifest, or call kubetrain.runtime.Trainer from Python")
    data = json_object(CONFIG_ENV, raw, "a JSON object with 'train' and 'checkpoint'")
    train = read(Train, data["train"], "spec.train") if data.get("train") is not None else None
    checkpoint = read(Checkpoint, data.get("checkpoint") or {}, "spec.checkpoint")
    divergence = read(Divergence, data.get("divergence") or {}, "spec.divergence")
    return RuntimeConfig(train, checkpoint, divergence)


def resolve_ref(ref: str, field: str) -> Callable[..., Any]:
    """Import 'package.module:function'; errors name the field (`spec.train.model: cannot import ...`)."""
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise RuntimeConfigError(f"{field}: {ref!r} must be a 'package.module:function' reference")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeConfigError(f"{field}: cannot import {module_name!r}: {exc}") from None
    target = getattr(module, attr, None)
    if target is None:
        raise RuntimeConfigError(f"{field}: module {module_name!r} has no attribute {attr!r}")
    if not callable(target):
        raise RuntimeConfigError(f"{field}: {ref!r} is not callable")
    return target  # type: ignore[no-any-return]


def path_map(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Cluster path -> local directory, as exported by `kubetrain run` (empty in a cluster)."""
    environ = os.environ if environ is None else environ
    try:
        mapping = json.loads(environ.get(PATH_MAP_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}


def local_path(path: str, environ: Mapping[str, str] | None = None) -> str:
    """Where a cluster path (e.g. a volume's mountPath `/ckpt/run1`) lives on this machine.

    Under `kubetrain run` volumes and the code directory are local directories; in a cluster this is the
    identity. Use it for paths hard-coded in a script (paths in args and env are already rewritten).
    """
    for mount, local in sorted(path_map(environ).items(), key=lambda item: -len(item[0])):
        if path == mount or path.startswith(mount.rstrip("/") + "/"):
            return local + path[len(mount.rstrip("/")):]
    return path


def trial_params(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This sweep trial's parameters ({"train.lr": 0.003, "width": 32}), from KUBETRAIN_PARAMS; {} outside a
    sweep. For a model or dataset factory that takes a searched value (docs/sweeps.md)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(PARAMS_ENV)
    return json_object(PARAMS_ENV, raw) if raw else {}
