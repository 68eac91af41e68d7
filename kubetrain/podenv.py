"""What spec.hang means for a training process: the progress directory, torch's flight recorder and the
process-group timeout. Shared by render (the pods' env), `kubetrain run` and the runtime that writes the
records (kubetrain.runtime.progress), and by their readers (kubetrain.observe.hang), none of which may import
each other.
"""

from __future__ import annotations

from typing import Any

PROGRESS_DIR_ENV = "KUBETRAIN_PROGRESS_DIR"
NODE_ENV = "KUBETRAIN_NODE"  # set per node by `kubetrain run` (1-based); pods use GROUP_RANK + 1
FR_REQUEST = "flight-recorder.request"  # touched by the watch: every rank dumps its flight recorder
HANG_ENV = "KUBETRAIN_HANG"  # spec.hang as JSON in rendered pods: the thresholds for readers in the cluster
POD_PROGRESS_DIR = "/tmp/kubetrain-progress"  # in rendered pods: /tmp is writable (an emptyDir with a read-only root)
FR_DUMP_FILE_ENV = "TORCH_FR_DUMP_TEMP_FILE"
FR_DUMP_PREFIX = "fr-dump-rank-"  # TORCH_FR_DUMP_TEMP_FILE: torch's watchdog appends the rank
# torch's flight recorder on (gloo and nccl), dumped by its watchdog when a collective times out. Only the
# TORCH_FR_* names: torch warns on every rank that TORCH_NCCL_TRACE_BUFFER_SIZE / _DUMP_ON_TIMEOUT are deprecated.
FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_ON_TIMEOUT": "1"}
PG_TIMEOUT_MARGIN_SECONDS = 60


def progress_env(directory: str) -> dict[str, str]:
    """The runtime's progress directory and torch's flight recorder, dumped into that directory."""
    return {**FLIGHT_RECORDER_ENV, PROGRESS_DIR_ENV: directory,
            FR_DUMP_FILE_ENV: f"{directory.rstrip('/')}/{FR_DUMP_PREFIX}"}


def process_group_timeout(hang: Any) -> int:
    """The process-group timeout that fits spec.hang: just above its longest fixed threshold, so a hang is
    declared (and every rank's stack taken) before torch's watchdog ends the collectives, and torch does
    not wait much longer than that (its default: 10 min for nccl, 30 min for gloo)."""
    return max(int(hang.timeoutSeconds), int(hang.phaseTimeoutSeconds)) + PG_TIMEOUT_MARGIN_SECONDS
