"""spec.tracking with a real MLflow server: the digits job, with kill -9 of the rank that logs, is one run with
every point once; TensorBoard's own reader and W&B's offline run files find the same points (one W&B run ID
across the restart, the API key in no file or log); a batch sent again after its answer was lost is logged
once; a tracker that is down never stops training."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.runtime.helpers import EXAMPLE, JOBS, Run, quiet_env, records, run_sync, worker_pid
from tests.runtime.torchmod import require_torch
from tests.runtime.wandbfiles import read_offline_run
from tests.testenv.mlflowserver import MLflowServer
from tests.testenv.polling import wait_for
from tests.testenv.processes import free_port

require_torch()
from kubetrain.runtime.trackers import MLflowConnection  # noqa: E402
from kubetrain.runtime.tracking import Buffered, Outcome, Point, RunFile, TrackingConfig  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(420)]
WANDB_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"  # 40 characters, as W&B's keys are


def tracked_digits(tmp_path: Path, tracking: dict[str, Any], model: str = "digits_task:build_model") -> Path:
    """The digits example with tracking, its code in `tmp_path/code` (with the held model beside it)."""
    doc = yaml.safe_load((EXAMPLE / "kubetrain.yaml").read_text())
    spec = doc["spec"]
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(EXAMPLE / "digits_task.py", code)
    shutil.copy(JOBS / "held_digits.py", code)
    spec["code"]["path"] = str(code)
    spec["train"]["model"] = model
    spec["volumes"][0]["localPath"] = str(tmp_path / "ckpt")
    spec["tracking"] = tracking
    path = tmp_path / "kubetrain.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def unique_steps(lines: list[dict[str, Any]], key: str) -> list[int]:
    return sorted({r["step"] for r in lines if r.get(key) is not None})


def killed_past_step_60(tmp_path: Path, spec: Path, wandb_env: dict[str, str]) -> tuple[int, str, str]:
    """Rank 0, which logs, dies past the step-50 checkpoint: the job fails, as a pod's container does. It is held
    before step 61 until its W&B run is open (wandb-core takes seconds to start), so the kill cannot come after
    the job ended (digits trains 288 steps in about 3 s)."""
    marker = uuid.uuid4().hex
    hold = tmp_path / "hold"
    hold.touch()
    killed = Run(["-f", str(spec)], quiet_env(TEST_MARKER=marker, HOLD_FILE=str(hold), HOLD_BEFORE_STEP="61",
                                              **wandb_env))
    try:
        killed.wait_for(lambda r: r["kind"] == "train" and r["step"] == 60)
        wait_for(lambda: any((tmp_path / "ckpt" / "digits" / "wandb").glob("offline-run-*")), "W&B's run", 120)
        os.kill(worker_pid(marker, rank=0), signal.SIGKILL)
        return killed.finish()
    finally:
        killed.kill()
        hold.unlink()


def test_kill_9_of_the_logging_rank_leaves_one_run_with_every_point_once(
        tmp_path: Path, mlflow_server: MLflowServer) -> None:
    experiment = f"digits-{uuid.uuid4().hex[:8]}"
    spec = tracked_digits(tmp_path, {"mlflow": {"trackingUri": mlflow_server.uri, "experiment": experiment},
                                     "wandb": {"project": "digits"},
                                     "tensorboard": {"logDir": "/ckpt/tb"}, "params": {"width": 64}},
                          model="held_digits:build_model")
    client = mlflow_server.client()
    wandb_env = {"WANDB_MODE": "offline", "WANDB_API_KEY": WANDB_KEY}  # W&B's own offline mode: no server here
    code, first, err = killed_past_step_60(tmp_path, spec, wandb_env)
    assert code != 0, first[-4000:] + err
    restarted = run_sync(["-f", str(spec)], quiet_env(**wandb_env))  # the pod's restart: a new process resumes
    assert restarted.returncode == 0, restarted.stdout[-4000:] + restarted.stderr
    out = restarted.stdout
    assert len(records(out, "resume")) == 1 and records(out, "resume")[0]["step"] >= 50
    lines = records(first) + records(out)

    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1, [r.info.run_id for r in runs]  # one run, whatever happened
    tracked = runs[0]
    assert tracked.info.status == "FINISHED" and tracked.info.run_name == "digits-ddp"
    expected = {"loss": unique_steps(lines, "loss"), "lr": unique_steps(lines, "lr"),
                "samples_per_s": unique_steps(lines, "samples_per_s"),
                "eval_loss": unique_steps(lines, "eval_loss"), "eval_accuracy": unique_steps(lines, "eval_accuracy")}
    assert len(expected["loss"]) == 14 and len(expected["eval_accuracy"]) == 12  # 288 steps, every 20; 12 epochs
    for key, steps in expected.items():
        history = [m.step for m in client.get_metric_history(tracked.info.run_id, key)]
        assert sorted(history) == steps, key  # every point once: no duplicate after the resume, none missing
    final_accuracy = records(out, "eval")[-1]["eval_accuracy"]
    assert tracked.data.metrics["eval_accuracy"] == final_accuracy
    tags = tracked.data.tags
    assert tags["kubetrain.image"] == "ghcr.io/kubetrain/digits:0.1.0" and tags["kubetrain.cluster"] == "local"
    assert tags["kubetrain.namespace"] == "default" and len(tags["kubetrain.spec-hash"]) == 16
    final_checkpoint = records(out, "checkpoint")[-1]["path"]
    assert tags["kubetrain.checkpoint"] == final_checkpoint
    params = tracked.data.params
    assert params["train.lr"] == "0.003" and params["train.epochs"] == "12" and params["width"] == "64"
    artifacts = {a.path for a in client.list_artifacts(tracked.info.run_id, "kubetrain")}
    assert artifacts == {"kubetrain/checkpoint.json", "kubetrain/spec.json"}
    spec_artifact = client.download_artifacts(tracked.info.run_id, "kubetrain/spec.json", str(tmp_path))
    assert yaml.safe_load(Path(spec_artifact).read_text())["spec"]["train"]["epochs"] == 12
    run_file = tmp_path / "ckpt" / "digits" / "tracking.json"  # the runs' IDs, beside the checkpoints
    links = [r["runs"] for r in records(first) + records(out) if r["kind"] == "tracking"]
    assert links[-1] == {"mlflow": f"{mlflow_server.uri}/#/experiments/{found.experiment_id}/runs/"
                                   f"{tracked.info.run_id}"}  # `status` and the operator show it
    assert "run (mlflow)" in restarted.stderr  # and the summary of `kubetrain run`

    assert_one_wandb_run(run_file, expected, records(out, "resume")[0]["step"])
    texts = [first, err, out, restarted.stderr]
    texts += [p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert all(WANDB_KEY not in text for text in texts)  # in no log, no run file, no W&B file
    assert_tensorboard_scalars(tmp_path / "ckpt" / "tb", expected)


def assert_one_wandb_run(run_file: Path, expected: dict[str, list[int]], resumed: int) -> None:
    """W&B's offline files: one run ID across the restart, no step twice, every step since the resume."""
    key = yaml.safe_load(run_file.read_text())["wandb"]["runId"]
    directories = sorted((run_file.parent / "wandb").glob("offline-run-*"))
    assert len(directories) == 2 and all(d.name.endswith(f"-{key}") for d in directories)  # one run ID
    wandb_runs = [read_offline_run(d) for d in directories]
    assert {run.run_id for run in wandb_runs} == {key}
    for name, steps in expected.items():
        logged = [step for run in wandb_runs for step in run.steps.get(name, [])]
        assert logged == sorted(set(logged)), name  # no step twice across the restart
        # W&B writes a run's file every second: a kill -9 may lose the killed process's last points
        assert [step for step in steps if step > resumed] == [step for step in logged if step > resumed], name


def assert_tensorboard_scalars(logdir: Path, expected: dict[str, list[int]]) -> None:
    """TensorBoard's own reader finds every point once."""
    reader = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    reader.Reload()
    assert set(reader.Tags()["scalars"]) == set(expected)
    for key, steps in expected.items():
        assert sorted(event.step for event in reader.Scalars(key)) == steps, key


class AnswerLost(MLflowConnection):
    """MLflow whose answer to the first batch is lost after the server applied it (a request that timed out on
    a busy machine, with the server's commit done): the tracker sends the batch again."""

    lost = 1

    def send(self, points: list[Point]) -> None:
        super().send(points)
        if self.lost:
            self.lost -= 1
            raise ConnectionError("Read timed out. (read timeout=15)")


def test_a_batch_sent_again_after_its_answer_was_lost_is_logged_once(
        tmp_path: Path, mlflow_server: MLflowServer) -> None:
    experiment = f"lost-{uuid.uuid4().hex[:8]}"
    config = TrackingConfig({"runName": "lost", "mlflow": {"trackingUri": mlflow_server.uri,
                                                           "experiment": experiment}}, uuid.uuid4().hex)
    connection = AnswerLost(config, RunFile(str(tmp_path)), config.data["mlflow"])
    tracker = Buffered(connection, capacity=100)
    for step in range(1, 6):
        tracker.add(step, {"loss": 1.0 / step})  # all in the first batch
    tracker.start()
    assert tracker.finish(Outcome("completed", 5, None), timeout=120) is None
    assert connection.lost == 0  # the first answer was lost, and the batch sent again
    client = mlflow_server.client()
    history = client.get_metric_history(connection.run_id, "loss")
    assert sorted(m.step for m in history) == [1, 2, 3, 4, 5]  # every point once


def test_a_tracker_that_is_down_never_stops_training_and_the_loss_is_said(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    config = TrackingConfig({"runName": "digits", "mlflow": {"trackingUri": down}}, "key")
    tracker = Buffered(MLflowConnection(config, RunFile(str(tmp_path)), config.data["mlflow"]), capacity=5)
    tracker.start()
    for step in range(1, 13):
        tracker.add(step, {"loss": 1.0 / step})  # never blocks, never raises
    line = tracker.finish(Outcome("completed", 12, None), timeout=120)
    assert line is not None and line.startswith(
        "kubetrain.runtime: tracking: mlflow: 12 points not logged (7 dropped from a full buffer of 5) (")
    assert "\n" not in line
    assert not (tmp_path / "tracking.json").exists()


class CloseHangs(MLflowConnection):
    """MLflow whose last request (closing the run) hangs past the end of training's flush."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.released = threading.Event()

    def close(self, outcome: Outcome) -> None:
        self.released.wait(60)
        super().close(outcome)


def test_a_run_left_open_at_the_flush_deadline_is_said(tmp_path: Path, mlflow_server: MLflowServer) -> None:
    config = TrackingConfig({"runName": "open", "mlflow": {"trackingUri": mlflow_server.uri,
                                                           "experiment": f"open-{uuid.uuid4().hex[:8]}"}}, "key")
    connection = CloseHangs(config, RunFile(str(tmp_path)), config.data["mlflow"])
    tracker = Buffered(connection, capacity=100)
    tracker.add(1, {"loss": 1.0})
    tracker.start()
    try:
        line = tracker.finish(Outcome("completed", 1, None), timeout=5)
    finally:
        connection.released.set()
    assert line == "kubetrain.runtime: tracking: mlflow: the run was not closed within 5 s (its last request " \
                   "had no answer)"
    history = mlflow_server.client().get_metric_history(connection.run_id, "loss")
    assert [m.step for m in history] == [1]  # every point was sent: only the close is missing
