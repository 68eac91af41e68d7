"""The trackers' blocking sides (kubetrain.runtime.tracking.Connection): MLflow, Weights & Biases and
TensorBoard. Each client is imported when its tracker is configured, never otherwise."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubetrain.runtime.config import RuntimeConfigError, local_path
from kubetrain.runtime.tracking import (
    METRIC_FIELDS,
    SEND_SECONDS,
    Buffered,
    Connection,
    Outcome,
    Point,
    RunFile,
    Tracker,
    TrackingConfig,
)

BATCH = 1000  # MLflow's log_batch takes at most 1000 metrics
PARAM_LENGTH = 6000  # MLflow's longest parameter value


def _missing(tracker: str, extra: str, exc: ImportError) -> RuntimeConfigError:
    return RuntimeConfigError(f"spec.tracking.{tracker}: {exc.name or extra} is not installed in the image: "
                              f"pip install 'kubetrain[{extra}]'")


class MLflowConnection(Connection):
    """One MLflow run per job: joined from tracking.json, else a running run with the job's key, else new
    (tagged kubetrain.previous-run with the job's last run: a recreated job's runs stay linked)."""

    name = "mlflow"

    def __init__(self, config: TrackingConfig, run_file: RunFile, section: dict[str, Any]) -> None:
        # a request must not hang the tracker's thread for minutes (MLflow retries 7 times by default)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
        try:
            # a tracker's client only when spec.tracking sets it (.importlinter)
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise _missing("mlflow", "mlflow", exc) from None
        self.uri = str(section["trackingUri"])
        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment = str(section.get("experiment") or config.run_name)
        self.config = config
        self.run_file = run_file
        self.run_id = ""

    def open(self) -> dict[str, int]:
        known = self.run_file.read().get(self.name) or {}
        run = self._get(known.get("runId")) or self._running_with_key() or self._create()
        self.run_id = run.info.run_id
        self.link = f"{self.uri.rstrip('/')}/#/experiments/{run.info.experiment_id}/runs/{self.run_id}"
        self.run_file.update(self.name, {"runId": self.run_id, "experimentId": run.info.experiment_id,
                                         "trackingUri": self.uri})
        if run.info.status != "RUNNING":  # a finished run continued (more epochs, a resumed job)
            self.client.update_run(self.run_id, status="RUNNING")
        return {key: max((m.step for m in self.client.get_metric_history(self.run_id, key)), default=-1)
                for key in run.data.metrics}

    def _get(self, run_id: str | None) -> Any:
        # a tracker's client only when spec.tracking sets it (.importlinter)
        from mlflow.exceptions import MlflowException

        if not run_id:
            return None
        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            if exc.get_http_status_code() == 404:  # type: ignore[no-untyped-call]
                return None  # deleted in the UI: a new run
            raise
        return run if run.info.lifecycle_stage == "active" else None

    def _experiment_id(self) -> str:
        # a tracker's client only when spec.tracking sets it (.importlinter)
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(self.experiment))
        except MlflowException:  # created by someone else meanwhile
            again = self.client.get_experiment_by_name(self.experiment)
            if again is None:
                raise
            return str(again.experiment_id)

    def _running_with_key(self) -> Any:
        """A restart without tracking.json (an object-store checkpoint.dir, or a kill before the file)."""
        runs = self.client.search_runs([self._experiment_id()], max_results=1,
                                       filter_string=f"tags.`kubetrain.run-key` = '{self.config.key}' "
                                                     "and attributes.status = 'RUNNING'")
        return runs[0] if runs else None

    def _create(self) -> Any:
        from mlflow.entities import Param  # a tracker's client only when spec.tracking sets it (.importlinter)

        experiment = self._experiment_id()
        tags = self.config.tags
        job = tags.get("kubetrain.job", "").replace("'", "")
        namespace = tags.get("kubetrain.namespace", "").replace("'", "")
        previous = self.client.search_runs([experiment], max_results=1, order_by=["attributes.start_time DESC"],
                                           filter_string=f"tags.`kubetrain.job` = '{job}' and "
                                                         f"tags.`kubetrain.namespace` = '{namespace}'")
        if previous:
            tags = {**tags, "kubetrain.previous-run": previous[0].info.run_id}
        run = self.client.create_run(experiment, run_name=self.config.run_name, tags=tags)
        params = [Param(k, v[:PARAM_LENGTH]) for k, v in sorted(self.config.params().items())]
        for start in range(0, len(params), 100):
            self.client.log_batch(run.info.run_id, params=params[start:start + 100])
        return run

    def send(self, points: list[Point]) -> None:
        from mlflow.entities import Metric  # a tracker's client only when spec.tracking sets it (.importlinter)

        metrics = [Metric(key, value, time_ms, step) for step, values, time_ms in points
                   for key, value in values.items()]
        for start in range(0, len(metrics), BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[start:start + BATCH])

    def close(self, outcome: Outcome) -> None:
        if outcome.status != "completed":
            return  # a stopped or failed process is restarted or resumed: the run goes on
        if outcome.checkpoint:
            self.client.set_tag(self.run_id, "kubetrain.checkpoint", outcome.checkpoint)
            self.client.log_dict(self.run_id, {"checkpoint": outcome.checkpoint, "step": outcome.step},
                                 "kubetrain/checkpoint.json")
        self.client.log_dict(self.run_id, self.config.data.get("spec") or {}, "kubetrain/spec.json")
        self.client.set_terminated(self.run_id, "FINISHED")


class WandbConnection(Connection):
    """One W&B run per job: its ID is the job's run key, resumed with resume="allow" by every restart. W&B
    refuses steps below a run's last, and an offline run knows none: the last step sent per metric is kept in
    tracking.json (and, online, W&B's own resumed step counts too), so no step is logged twice; a process
    killed with -9 loses the points W&B's core had not written yet (at most its last second). The API key is
    W&B's WANDB_API_KEY (a secretKeyRef in the pods); kubetrain never reads it."""

    name = "wandb"

    def __init__(self, config: TrackingConfig, run_file: RunFile, section: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise _missing("wandb", "wandb", exc) from None
        self._wandb = wandb
        self.section = section
        self.config = config
        self.run_file = run_file
        self.run: Any = None
        self.last: dict[str, int] = {}

    def open(self) -> dict[str, int]:
        section, config = self.section, self.config
        directory = os.environ.get("WANDB_DIR") or (str(self.run_file.path.parent) if self.run_file.path else None)
        self.run = self._wandb.init(
            id=config.key, resume="allow", name=config.run_name, project=str(section["project"]),
            entity=section.get("entity"), group=section.get("group") or config.run_name, dir=directory,
            config={**config.params(), **config.tags}, allow_val_change=True,
            # stdout carries the metrics lines: W&B must not wrap it (the pod's log has them anyway). Run data
            # reaches the run's file every second, not every 15 s: a kill -9 loses at most that much
            settings=self._wandb.Settings(console="off", x_transaction_log_flush_interval=SEND_SECONDS))
        self.link = self.run.url  # None offline
        known = self.run_file.read().get(self.name) or {}
        if known.get("runId") == config.key:
            self.last = {str(k): int(v) for k, v in (known.get("lastSteps") or {}).items()}
        resumed = int(getattr(self.run, "starting_step", 0) or 0)  # online: the step after the run's last
        if resumed:
            names = [name for fields in METRIC_FIELDS.values() for name in fields]
            self.last.update({name: max(self.last.get(name, -1), resumed - 1) for name in names})
        self.run_file.update(self.name, {"runId": config.key, "lastSteps": self.last})
        return dict(self.last)

    def send(self, points: list[Point]) -> None:
        for step, values, _ in points:
            self.run.log(values, step=step)
            self.last.update(dict.fromkeys(values, step))
        self.run_file.update(self.name, {"runId": self.config.key, "lastSteps": self.last})

    def close(self, outcome: Outcome) -> None:
        if outcome.status == "completed" and outcome.checkpoint:
            self.run.summary["kubetrain.checkpoint"] = outcome.checkpoint
        elif outcome.status != "completed":
            self.run.mark_preempting()  # a stopped or failed process is restarted or resumed: the run goes on
        self.run.finish(exit_code=0 if outcome.status == "completed" else 1)


class TensorBoardConnection(Connection):
    """Event files in spec.tracking.tensorboard.logDir (torch's SummaryWriter; needs the tensorboard package).
    Steps already in the directory's event files are not written again."""

    name = "tensorboard"

    def __init__(self, config: TrackingConfig, run_file: RunFile, section: dict[str, Any]) -> None:
        try:
            # a tracker's client only when spec.tracking sets it (.importlinter)
            from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise _missing("tensorboard", "tensorboard", exc) from None
        self.directory = local_path(str(section["logDir"]))
        self._writer_class = SummaryWriter
        self._reader_class = EventAccumulator
        self.writer: Any = None

    def open(self) -> dict[str, int]:
        if "://" not in self.directory:
            Path(self.directory).mkdir(parents=True, exist_ok=True)  # the reader refuses a missing directory
        reader = self._reader_class(self.directory, size_guidance={"scalars": 0})
        reader.Reload()
        last = {tag: max(event.step for event in reader.Scalars(tag)) for tag in reader.Tags().get("scalars", [])}
        self.writer = self._writer_class(self.directory)
        return last

    def send(self, points: list[Point]) -> None:
        for step, values, time_ms in points:
            for key, value in values.items():
                self.writer.add_scalar(key, value, step, walltime=time_ms / 1000)
        self.writer.flush()

    def close(self, outcome: Outcome) -> None:
        if self.writer is not None:
            self.writer.close()


CONNECTIONS: dict[str, type[Connection]] = {
    "mlflow": MLflowConnection, "wandb": WandbConnection, "tensorboard": TensorBoardConnection}


def open_tracker(config: TrackingConfig, checkpoint_dir: str | None) -> Tracker:
    """Rank 0's trackers, each on its own thread (its client is imported now: a missing one is a config
    error, said before training starts)."""
    run_file = RunFile(checkpoint_dir)
    trackers = [Buffered(connection(config, run_file, config.data[name]), config.buffer_points)
                for name, connection in CONNECTIONS.items() if config.data.get(name)]
    for tracker in trackers:
        tracker.start()
    return Tracker(trackers, config)
