"""`kubetrain tensorboard` on this machine: TensorBoard over the job's event files (spec.tracking.tensorboard).

The event files are where `kubetrain run` puts them: logDir with the spec's volumes mapped to their local
directories (kubetrain.local.paths), or an object store URL as it is. TensorBoard runs as its own process
(`python -m tensorboard.main`), so nothing of it is imported here.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import UsageError
from kubetrain.jobspec.load import LoadedSpec
from kubetrain.local.paths import build_path_map

DEFAULT_PORT = 6006


@dataclass(frozen=True)
class TensorBoardPlan:
    logdir: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "tensorboard.main", "--logdir", self.logdir, "--host", self.host,
                "--port", str(self.port)]


def local_logdir(loaded: LoadedSpec, volumes: list[str], cwd: Path) -> str:
    """The job's TensorBoard directory on this machine (as `kubetrain run` with the same --volume wrote it)."""
    tracking = loaded.job.spec.tracking
    if tracking is None or tracking.tensorboard is None:
        raise UsageError(f"{loaded.source}: spec.tracking.tensorboard is not set: this job writes no event files "
                         "(or give --logdir DIR)")
    path_map, _ = build_path_map(loaded, volumes, cwd, create=False)
    logdir = path_map.rewrite(tracking.tensorboard.logDir)
    if "://" not in logdir and not Path(logdir).is_dir():
        raise UsageError(f"spec.tracking.tensorboard.logDir: {logdir} does not exist yet (run the job first: "
                         "kubetrain run)")
    return logdir


def require_tensorboard() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise UsageError("tensorboard is not installed: pip install 'kubetrain[tensorboard]'")
