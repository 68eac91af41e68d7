"""Cluster paths -> local directories for `kubetrain run`.

In a pod the program sees volumes at their mountPath (e.g. /ckpt) and the code at code.mountPath. Locally
each volume is a directory (`localPath`, default `.kubetrain/volumes/<name>` beside the spec, or
`--volume NAME=DIR`) and the code is the spec's code directory. `kubetrain run` rewrites those path
prefixes wherever they start a path in the program's arguments and environment values (KUBETRAIN_CONFIG's
checkpoint.dir included), and exports the mapping as KUBETRAIN_PATH_MAP (JSON) for paths a script builds
itself (`kubetrain.runtime.local_path`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import UsageError
from kubetrain.jobspec.load import LoadedSpec

DEFAULT_VOLUME_DIR = ".kubetrain/volumes"
SCRATCH_DIR = ".kubetrain/scratch"  # checkpoint.ephemeral: a fresh directory per run, as a new pod has
_BEFORE = r"(?:^|(?<=[=:,;\s\"']))"  # a path starts the value, or follows a separator or quote
_AFTER = r"(?=$|[/:,;\s\"'])"


@dataclass(frozen=True)
class PathMap:
    """(cluster path, local directory) pairs."""

    mounts: tuple[tuple[str, str], ...]

    def _pattern(self) -> re.Pattern[str] | None:
        if not self.mounts:
            return None
        ordered = sorted((mount for mount, _ in self.mounts), key=len, reverse=True)
        alternatives = "|".join(re.escape(mount.rstrip("/") or "/") for mount in ordered)
        return re.compile(f"{_BEFORE}({alternatives}){_AFTER}")

    def rewrite(self, value: str) -> str:
        """Replace cluster mount paths at the start of every path inside `value`."""
        pattern = self._pattern()
        if pattern is None:
            return value
        table = {mount.rstrip("/") or "/": local for mount, local in self.mounts}
        return pattern.sub(lambda match: table[match.group(1)], value)

    def to_env(self) -> str:
        return json.dumps(dict(self.mounts), sort_keys=True)


def _parse_overrides(overrides: list[str], names: set[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for item in overrides:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            raise UsageError(f"--volume {item!r}: expected NAME=DIR")
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise UsageError(f"--volume {name}: the spec has no volume named {name!r} (volumes: {known})")
        parsed[name] = directory
    return parsed


def build_path_map(loaded: LoadedSpec, overrides: list[str], cwd: Path, run_id: str = "run",
                   create: bool = True) -> tuple[PathMap, Path | None]:
    """The path map for a spec and the local code directory, if any. With `create`, the volume directories are
    made (a dry run makes none). An ephemeral checkpoint.dir on no volume (in the pod: the container's own
    layer, gone with it) becomes a fresh directory of this run under .kubetrain/scratch/<run_id>."""
    spec = loaded.job.spec
    chosen = _parse_overrides(overrides, {volume.name for volume in spec.volumes})
    mounts: list[tuple[str, str]] = []
    for index, volume in enumerate(spec.volumes):
        if volume.name in chosen:
            local = (cwd / chosen[volume.name]).resolve()
        else:
            local = (loaded.base_dir / (volume.localPath or f"{DEFAULT_VOLUME_DIR}/{volume.name}")).resolve()
        if create:
            _make(local, f"spec.volumes[{index}].localPath")
        mounts.append((volume.mountPath, str(local)))
    code_dir = None
    if spec.code:
        code_dir = (loaded.base_dir / spec.code.path).resolve()
        if not code_dir.is_dir():
            raise UsageError(f"spec.code.path: {code_dir} is not a directory")
        mounts.append((spec.code.mountPath, str(code_dir)))
    scratch = _scratch_checkpoint_dir(loaded, [mount for mount, _ in mounts], run_id)
    if scratch is not None:
        if create:
            _make(Path(scratch[1]), "spec.checkpoint.dir")
        mounts.append(scratch)
    return PathMap(tuple(mounts)), code_dir


def _scratch_checkpoint_dir(loaded: LoadedSpec, mounted: list[str], run_id: str) -> tuple[str, str] | None:
    checkpoint = loaded.job.spec.checkpoint
    directory = checkpoint.dir
    if not (checkpoint.ephemeral and directory and directory.startswith("/")):
        return None
    if any(directory.rstrip("/") == m.rstrip("/") or directory.startswith(m.rstrip("/") + "/") for m in mounted):
        return None
    return directory, str((loaded.base_dir / SCRATCH_DIR / run_id).resolve())


def _make(directory: Path, field: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{field}: cannot create {directory}: {exc.strerror}") from None
