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


def build_path_map(loaded: LoadedSpec, overrides: list[str], cwd: Path) -> tuple[PathMap, Path | None]:
    """The path map for a spec (creating volume directories) and the local code directory, if any."""
    spec = loaded.job.spec
    chosen = _parse_overrides(overrides, {volume.name for volume in spec.volumes})
    mounts: list[tuple[str, str]] = []
    for index, volume in enumerate(spec.volumes):
        if volume.name in chosen:
            local = (cwd / chosen[volume.name]).resolve()
        else:
            local = (loaded.base_dir / (volume.localPath or f"{DEFAULT_VOLUME_DIR}/{volume.name}")).resolve()
        try:
            local.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            field = f"spec.volumes[{index}].localPath"
            raise UsageError(f"{field}: cannot create {local}: {exc.strerror}") from None
        mounts.append((volume.mountPath, str(local)))
    code_dir = None
    if spec.code:
        code_dir = (loaded.base_dir / spec.code.path).resolve()
        if not code_dir.is_dir():
            raise UsageError(f"spec.code.path: {code_dir} is not a directory")
        mounts.append((spec.code.mountPath, str(code_dir)))
    return PathMap(tuple(mounts)), code_dir
