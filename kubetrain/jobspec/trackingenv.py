"""The variables that carry `spec.tracking` from the render to the runtime (torch-free; both sides import it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

TRACKING_ENV = "KUBETRAIN_TRACKING"  # JSON: the section, the run's name, tags and the spec (kubetrain.runtime)
RUN_KEY_ENV = "KUBETRAIN_TRACKING_KEY"  # the job's run key (tag kubetrain.run-key; the W&B run ID)
TENSORBOARD_ENV = "TENSORBOARD_LOGDIR"
WANDB_KEY_ENV = "WANDB_API_KEY"


@dataclass(frozen=True)
class RunIdentity:
    """What names the job's run: where it runs, and where its checkpoints are (a new checkpoint directory,
    as an update with policy recreate gives, is a new run)."""

    cluster: str
    namespace: str
    name: str
    checkpoint_dir: str | None

    @property
    def key(self) -> str:
        text = "\0".join((self.cluster, self.namespace, self.name, self.checkpoint_dir or ""))
        return hashlib.sha256(text.encode()).hexdigest()[:32]
