"""The nodes of a kind cluster as containers: their names and the engine that runs them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from kubetrain.imagebuild.process import run_captured

ENGINES = ("docker", "podman")  # kind's node providers, in kind's order of detection


def node_engine(which: Callable[[str], str | None] = shutil.which) -> str:
    """The container engine kind runs its nodes with: KIND_EXPERIMENTAL_PROVIDER when it names one, else
    docker when installed, else podman when installed (kind's own order), else docker (to report it)."""
    chosen = os.environ.get("KIND_EXPERIMENTAL_PROVIDER", "")
    if chosen in ENGINES:
        return chosen
    return next((engine for engine in ENGINES if which(engine)), "docker")


def kind_nodes(cluster: str) -> list[str]:
    """The node containers of the kind cluster (none when kind cannot list them)."""
    result = run_captured(["kind", "get", "nodes", "--name", cluster])
    return result.stdout.split() if result.code == 0 else []
