"""`kubetrain tensorboard`: TensorBoard serves the event files the runtime wrote where `kubetrain run` puts them
(the spec's logDir on the volume's local directory), checked over HTTP on TensorBoard's scalars endpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from tests.runtime.torchmod import require_torch
from tests.testenv.polling import wait_for
from tests.testenv.processes import free_port

SPEC = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "digits"},
        "spec": {"image": "repo/digits:1", "command": ["python", "train.py"],
                 "volumes": [{"name": "ckpt", "claim": "ckpt", "mountPath": "/ckpt", "localPath": "volume"}],
                 "tracking": {"tensorboard": {"logDir": "/ckpt/tb"}}}}


def write_spec(directory: Path, spec: dict[str, Any]) -> Path:
    path = directory / "kubetrain.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def write_events(logdir: Path, points: list[tuple[int, dict[str, float]]]) -> None:
    """Event files as the runtime writes them (its TensorBoard connection, torch's SummaryWriter)."""
    require_torch()
    from kubetrain.runtime.trackers import TensorBoardConnection
    from kubetrain.runtime.tracking import Outcome, Point, RunFile, TrackingConfig

    connection = TensorBoardConnection(TrackingConfig({}, "key"), RunFile(None), {"logDir": str(logdir)})
    connection.open()
    connection.send([Point(step, values, int(time.time() * 1000)) for step, values in points])
    connection.close(Outcome("completed", points[-1][0], None))


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_it_serves_the_scalars_a_local_run_wrote(tmp_path: Path) -> None:
    points = [(step, {"loss": 1.0 / step, "lr": 0.003}) for step in range(20, 220, 20)]
    write_events(tmp_path / "volume" / "tb", points)
    spec = write_spec(tmp_path, SPEC)
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "kubetrain", "tensorboard", "digits", "-f", str(spec),
                               "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def alive() -> None:
            if server.poll() is not None:
                raise AssertionError(f"kubetrain tensorboard exited {server.returncode}: {server.communicate()}")

        tags = wait_for(lambda: get_json(f"{base}/data/plugin/scalars/tags"), "TensorBoard's scalars", 120,
                        interval=0.5, tolerate=(urllib.error.URLError, OSError), guard=alive)
        assert set(tags["."]) == {"loss", "lr"}  # the run is the logdir itself
        loss = get_json(f"{base}/data/plugin/scalars/scalars?tag=loss&run=.")
        assert [row[1] for row in loss] == [step for step, _ in points]  # (wall time, step, value) per point
        assert loss[-1][2] == pytest.approx(1.0 / 200)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert err.splitlines()[0] == f"TensorBoard of {tmp_path / 'volume' / 'tb'} at {base}/ (Ctrl-C stops it)"


@pytest.mark.parametrize(("spec", "args", "message"), [
    ({**SPEC, "spec": {**SPEC["spec"], "tracking": {"mlflow": {"trackingUri": "http://mlflow:5000"}}}}, [],
     "spec.tracking.tensorboard is not set: this job writes no event files (or give --logdir DIR)"),
    (SPEC, [], "does not exist yet (run the job first: kubetrain run)"),
    (SPEC, ["other"], "is the job 'digits', not 'other' (give its spec with -f)"),
])
def test_a_job_without_event_files_is_one_line(tmp_path: Path, spec: dict[str, Any], args: list[str],
                                                message: str) -> None:
    path = write_spec(tmp_path, spec)
    result = CliRunner().invoke(cli, ["tensorboard", *args, "-f", str(path)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
