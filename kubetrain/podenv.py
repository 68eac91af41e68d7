"""The names that the pod, `kubetrain run` and their readers agree on, each defined once: environment
variables, the progress directory's files and the launcher's failure line, and what spec.hang means for a
training process (the flight recorder, the process-group timeout). The floor below the other modules (it
imports none of them): render (the pods' env), `kubetrain run`, the pod's launcher, the runtime and the
readers (kubetrain.observe, the controller's hang watch) all import it, and none of them may import each
other. kubetrain.observe.probe repeats a few of these names: it runs from its source in images without
kubetrain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONFIG_ENV = "KUBETRAIN_CONFIG"  # JSON: spec.train, .checkpoint, .divergence for `python -m kubetrain.runtime`
PATH_MAP_ENV = "KUBETRAIN_PATH_MAP"  # JSON: the spec's pod paths to this machine's (`kubetrain run` only)
RUN_ID_ENV = "KUBETRAIN_RUN_ID"  # one `kubetrain run` in each of its processes' env (to find them again)
JOB_NAME_ENV = "KUBETRAIN_JOB_NAME"
TRACKING_ENV = "KUBETRAIN_TRACKING"  # JSON: the section, the run's name, tags and the spec (kubetrain.runtime)
RUN_KEY_ENV = "KUBETRAIN_TRACKING_KEY"  # the job's run key (tag kubetrain.run-key; the W&B run ID)
PARAMS_ENV = "KUBETRAIN_PARAMS"  # JSON: a sweep trial's parameters (kubetrain.runtime.trial_params)
TENSORBOARD_ENV = "TENSORBOARD_LOGDIR"
WANDB_KEY_ENV = "WANDB_API_KEY"
# torchrun, run in-process by a wrapper that exits 128+signal when stopped and with the root-cause worker's
# code on failure (torchrun itself exits 1 for both)
LAUNCHER = "kubetrain.runtime.launch"
FAILED_RANK = f"{LAUNCHER}: rank "  # starts the launcher's one line per failed rank (`kubetrain run` reads it)
# A local run's node 1: "1" = its launcher starts the rendezvous store on its --rdzv-endpoint port (every agent
# is a client), in a process that lives until the pipe STORE_HOLD_FD_ENV names reaches its end (kubetrain run
# closes it once every agent has exited). STORE_PROCESS_NAME is that process's /proc/PID/comm.
STORE_HOST_ENV = "KUBETRAIN_STORE_HOST"
STORE_HOLD_FD_ENV = "KUBETRAIN_STORE_HOLD_FD"  # set by `kubetrain run` when it starts node 1's agent
STORE_PROCESS_NAME = "kubetrain-store"
# Where a launcher keeps its temporary files (torchrun's copies of its workers' output): `kubetrain run` gives
# each run's agents one directory and removes it after the run, even when it had to SIGKILL an agent.
LAUNCH_TMPDIR_ENV = "KUBETRAIN_LAUNCH_TMPDIR"

PROGRESS_DIR_ENV = "KUBETRAIN_PROGRESS_DIR"
NODE_ENV = "KUBETRAIN_NODE"  # set per agent by `kubetrain run` (1-based); pods use GROUP_RANK + 1
FR_REQUEST = "flight-recorder.request"  # touched by the watch: every rank dumps its flight recorder
# A rank's answer when it has no flight recorder to dump (no process group yet, or the recorder off): the asker
# then stops waiting for it.
FR_NONE = b'{"entries": []}'
STACKS_REQUEST = "stacks.request"  # replaced by an asker: every rank's writer thread appends its stacks
STACKS_ANSWER = "kubetrain: stacks on request "  # the writer's line before its dump (+ the request's id)
STACKS_ANSWERED = "kubetrain: end of stacks on request "  # and after it: the answer is complete
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


def record_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"rank-{rank}.json"


def stacks_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"stacks-rank-{rank}.txt"


def flight_record_path(directory: str | Path, rank: int) -> Path:
    return Path(directory) / f"flight-recorder-rank-{rank}.json"
