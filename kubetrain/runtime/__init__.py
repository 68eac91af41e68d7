"""kubetrain.runtime: the in-container training library (imports torch; the CLI never imports it).

Two ways to run user code, identically under `kubetrain run`, a PyTorchJob and a TrainJob:

* the Trainer API: `python -m kubetrain.runtime` reads KUBETRAIN_CONFIG (the spec's `train` and
  `checkpoint` sections) and runs `Trainer(...).fit()`; from Python, `Trainer(Train(...), Checkpoint(...))`;
* any training script, started by torchrun, which may use `distributed()`, `CheckpointStore`, `local_path`.

See docs/runtime.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubetrain.runtime.checkpoint import CheckpointStore
    from kubetrain.runtime.config import RuntimeConfigError, load_config, local_path, resolve_ref, trial_params
    from kubetrain.runtime.distributed import (
        DistEnv,
        distributed,
        exit_process,
        init_distributed,
        shutdown_distributed,
    )
    from kubetrain.runtime.divergence import TrainingDiverged
    from kubetrain.runtime.stop import EXIT_STOP_TIMEOUT, TrainingStopped
    from kubetrain.runtime.trainer import Factories, FitResult, Trainer

__all__ = [
    "EXIT_STOP_TIMEOUT",
    "CheckpointStore",
    "DistEnv",
    "Factories",
    "FitResult",
    "RuntimeConfigError",
    "Trainer",
    "TrainingDiverged",
    "TrainingStopped",
    "distributed",
    "exit_process",
    "init_distributed",
    "load_config",
    "local_path",
    "resolve_ref",
    "shutdown_distributed",
    "trial_params",
]
# The names load on first use: the pod's launcher (kubetrain.runtime.launch) is in this package, and loading
# the Trainer here would give it torch's training stack and the spec's models (tests/runtime/test_launcher_imports.py).
_HOME = {
    "CheckpointStore": "checkpoint", "RuntimeConfigError": "config", "load_config": "config", "local_path": "config",
    "resolve_ref": "config", "trial_params": "config", "DistEnv": "distributed", "distributed": "distributed",
    "exit_process": "distributed",
    "init_distributed": "distributed", "shutdown_distributed": "distributed", "TrainingDiverged": "divergence",
    "EXIT_STOP_TIMEOUT": "stop", "TrainingStopped": "stop", "Factories": "trainer", "FitResult": "trainer",
    "Trainer": "trainer",
}


# mypy reads the names from the TYPE_CHECKING imports above, so a missing one is an error; a module
# __getattr__ it could see would type every unknown name as Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in _HOME:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"kubetrain.runtime.{_HOME[name]}"), name)
