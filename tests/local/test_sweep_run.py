"""`kubetrain sweep run` end to end: an 8-trial digits sweep, 2 trials at a time, the worst pruned; the pruned trials'
processes gone within the stop's grace period; the best trial, promoted and re-run alone, reproduces its objective."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from kubetrain.local.sweep import STOP_GRACE_SECONDS, TRIAL_ENV
from tests.runtime.helpers import EXAMPLE, KUBETRAIN, REPO, pids_with_env, quiet_env, records
from tests.runtime.torchmod import require_torch

MARKER_ENV = "KUBETRAIN_TEST_SWEEP"

require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(900)]
SLACK_SECONDS = 5.0  # after SIGKILL: the kernel reaping the processes


class TrialProcesses:
    """Samples /proc: when each trial's processes (KUBETRAIN_SWEEP_TRIAL) were last seen, and how many trials
    had processes at once. Only this sweep's processes count (their environment carries `marker`): another
    worker may run another sweep of the same example, with the same trial names, at the same time."""

    def __init__(self) -> None:
        self.marker = uuid.uuid4().hex
        self.last_seen: dict[str, float] = {}
        self.most_at_once = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        needle, marker = f"{TRIAL_ENV}=".encode(), f"{MARKER_ENV}={self.marker}".encode()
        while not self.done.wait(0.25):
            names = set()
            for entry in Path("/proc").iterdir():
                try:
                    environ = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
                except OSError:
                    continue
                if marker in environ:
                    names |= {item[len(needle):].decode() for item in environ if item.startswith(needle)}
            now = time.time()
            self.last_seen.update(dict.fromkeys(names, now))
            self.most_at_once = max(self.most_at_once, len(names))


def test_an_8_trial_sweep_prunes_the_worst_and_its_best_trial_reproduces(tmp_path: Path) -> None:
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text((EXAMPLE / "kubetrain-sweep.yaml").read_text().replace("path: .", f"path: {EXAMPLE}"))
    watch = TrialProcesses()
    watch.thread.start()
    try:
        result = subprocess.run([*KUBETRAIN, "sweep", "run", "-f", str(spec), "-o", "json"],
                                env={**quiet_env(), MARKER_ENV: watch.marker}, cwd=REPO,
                                capture_output=True, text=True, timeout=840, check=False)
    finally:
        watch.done.set()
        watch.thread.join()
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    trials = data["trials"]
    assert len(trials) == 8 and watch.most_at_once <= 2
    pruned = [t for t in trials if t["state"] == "pruned"]
    assert pruned and all(t["params"]["train.lr"] < 1e-4 for t in pruned), trials
    assert {t["state"] for t in trials} == {"complete", "pruned"}, result.stderr[-3000:]
    state = json.loads((tmp_path / ".kubetrain/sweeps/digits-sweep/state.json").read_text())
    for trial in pruned:  # gone within the grace period: SIGTERM, then SIGKILL for anything left
        pruned_at = state["trials"][trial["trial"]]["finished"]
        last = watch.last_seen[f"digits-sweep-t{trial['trial']}"]
        assert last - pruned_at <= STOP_GRACE_SECONDS + SLACK_SECONDS, (trial, last - pruned_at)
    assert not any(pids_with_env(TRIAL_ENV, name) for name in watch.last_seen)

    best = data["best"]
    assert best["state"] == "complete" and best["objective"] == max(t["objective"] for t in trials)
    promoted = tmp_path / "best.yaml"
    promote = subprocess.run([*KUBETRAIN, "sweep", "best", "-f", str(spec), "--promote", str(promoted)],
                             env=quiet_env(), cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert promote.returncode == 0, promote.stderr
    assert "sweep:" not in promoted.read_text()
    alone = subprocess.run([*KUBETRAIN, "run", "--raw", "-f", str(promoted), "--volume", f"ckpt={tmp_path / 'alone'}"],
                           env=quiet_env(), cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert records(alone.stdout, "eval")[-1]["eval_accuracy"] == best["objective"]



SCRIPT = """\
import argparse, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
lr, depth = parser.parse_args().lr, int(os.environ["DEPTH"])
agrees = json.loads(os.environ["KUBETRAIN_PARAMS"]) == {"lr": lr, "depth": depth}
for step in (1, 2, 3):
    loss = abs(lr - 0.01) + depth / 1000 + (0 if agrees else 100) + 1 / step
    print("KUBETRAIN_METRICS " + json.dumps({"kind": "eval", "step": step, "val_loss": loss}), flush=True)
"""
SCRIPT_SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: script-sweep}
spec:
  image: ghcr.io/acme/script:1
  command: [python, train.py]
  code: {path: .}
sweep:
  search: {algorithm: grid}
  parameters:
    - {name: lr, choice: [0.1, 0.01], arg: --lr}
    - {name: depth, int: [1, 2], env: DEPTH}
  objective: {metric: val_loss, goal: min}
  parallelism: 2
"""


def test_a_plain_script_gets_its_values_as_arguments_and_env_and_reports_its_own_metric(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "kubetrain.yaml").write_text(SCRIPT_SPEC)
    result = subprocess.run([*KUBETRAIN, "sweep", "run", "-o", "json"], env=quiet_env(), cwd=tmp_path,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    got = {(t["params"]["lr"], t["params"]["depth"]): round(t["objective"], 6) for t in data["trials"]}
    assert got == {(lr, depth): round(abs(lr - 0.01) + depth / 1000 + 1 / 3, 6)
                   for lr in (0.1, 0.01) for depth in (1, 2)}
    assert data["best"]["params"] == {"lr": 0.01, "depth": 1}


SLOW_SCRIPT = """\
import json, time
for step in range(1, 241):
    print("KUBETRAIN_METRICS " + json.dumps({"kind": "eval", "step": step, "val_loss": 1 / step}), flush=True)
    time.sleep(0.5)
"""


def test_the_budget_stops_a_running_trial_and_leaves_no_process(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SLOW_SCRIPT)
    spec = (SCRIPT_SPEC.replace("name: script-sweep", "name: slow-sweep")
            .replace("  parallelism: 2\n", "  parallelism: 1\n  trials: 1\n  budget: {maxSeconds: 5}\n"))
    (tmp_path / "kubetrain.yaml").write_text(spec.replace("arg: --lr", "env: LR"))
    result = subprocess.run([*KUBETRAIN, "sweep", "run", "-o", "json"], env=quiet_env(), cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 1 and "no trial completed" in result.stderr, result.stderr[-3000:]
    (trial,) = json.loads(result.stdout)["trials"]
    assert trial["state"] == "stopped"
    steps = records((tmp_path / ".kubetrain/sweeps/slow-sweep/t0/output.log").read_text())
    assert max((r["step"] for r in steps), default=0) < 240  # stopped, not run to its end (2 min)
    assert "budget.maxSeconds reached: stopping trial 0" in result.stderr
    assert pids_with_env(TRIAL_ENV, "slow-sweep-t0") == []
