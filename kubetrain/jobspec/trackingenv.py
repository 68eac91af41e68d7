"""What names a tracked job's run (its key reaches the pods as kubetrain.podenv.RUN_KEY_ENV)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


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
