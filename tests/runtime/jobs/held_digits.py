"""The digits example's model, held on rank 0 before one training step while a file exists.

A test that kills the rank which logs needs it alive past a checkpoint and until its trackers are open; the
digits job trains 288 steps in a few seconds, so a kill sent on a metrics line can land after the job ended.
Held, rank 0 waits (its tracker threads run on) until the test kills it or removes the file.
"""

from __future__ import annotations

import os
import time
from typing import Any

from digits_task import build_model as build_digits_model
from torch import nn

HOLD_FILE = os.environ.get("HOLD_FILE", "")
HOLD_BEFORE_STEP = int(os.environ.get("HOLD_BEFORE_STEP", "0"))


class Held(nn.Module):
    """The digits model; on rank 0, the training forward of step HOLD_BEFORE_STEP waits while HOLD_FILE exists."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = build_digits_model()
        self.steps = 0

    def forward(self, x: Any) -> Any:
        if self.training:
            self.steps += 1
            if self.steps == HOLD_BEFORE_STEP and os.environ.get("RANK") == "0":
                while HOLD_FILE and os.path.exists(HOLD_FILE):
                    time.sleep(0.05)
        return self.inner(x)


def build_model() -> nn.Module:
    return Held()
