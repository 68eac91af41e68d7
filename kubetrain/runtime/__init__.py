"""kubetrain.runtime: the in-container training library (imports torch; the CLI never imports it).

Two ways to run user code, identically under `kubetrain run`, a PyTorchJob and a TrainJob:

* the Trainer API: `python -m kubetrain.runtime` reads KUBETRAIN_CONFIG (the spec's `train` and
  `checkpoint` sections) and runs `Trainer(...).fit()`; from Python, `Trainer(Train(...), Checkpoint(...))`;
* any training script, started by torchrun, which may use `distributed()`, `CheckpointStore`, `local_path`.

See docs/runtime.md.
"""

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
