"""Upstream manifests parsed with libyaml: the pinned CRDs are up to ~1 MB of YAML each, and PyYAML's
pure-Python loader spent ~5 s of every Trainer module's set-up and again of its teardown on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_LOADER)


def load_all(path: Path) -> list[Any]:
    return list(yaml.load_all(path.read_text(), Loader=_LOADER))
