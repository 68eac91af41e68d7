"""kubetrain's per-user cache directory (parsed CRDs, downloaded schemas, compiled templates)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$KUBETRAIN_CACHE_DIR, else $XDG_CACHE_HOME/kubetrain, else ~/.cache/kubetrain."""
    if os.environ.get("KUBETRAIN_CACHE_DIR"):
        return Path(os.environ["KUBETRAIN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kubetrain"
