"""A tracked local sweep with the real MLflow server: every trial is one run in the sweep's experiment, tagged with
the sweep and its number, with its parameters and its objective; TensorBoard's event files are one folder per
trial below the sweep's."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.runtime.helpers import EXAMPLE, KUBETRAIN, REPO, quiet_env
from tests.runtime.torchmod import require_torch
from tests.testenv.mlflowserver import MLflowServer

require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(600)]


def tracked_sweep(tmp_path: Path, name: str, mlflow_uri: str) -> Path:
    """The digits sweep, 2 trials of 1 epoch at once, tracked in MLflow and TensorBoard (a volume of its own)."""
    doc = yaml.safe_load((EXAMPLE / "kubetrain-sweep.yaml").read_text())
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["code"]["path"] = str(EXAMPLE)
    spec["train"]["epochs"] = 1
    spec["volumes"].append({"name": "tb", "claim": "tb", "mountPath": "/tb", "localPath": str(tmp_path / "tb")})
    spec["tracking"] = {"mlflow": {"trackingUri": mlflow_uri}, "tensorboard": {"logDir": "/tb"}}
    doc["sweep"] = {"search": {"algorithm": "grid"}, "parameters": [{"name": "train.lr", "choice": [0.01, 0.003]}],
                    "objective": {"metric": "eval_accuracy", "goal": "max"}, "parallelism": 2}
    path = tmp_path / "kubetrain.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_each_trial_is_a_run_grouped_under_the_sweep(tmp_path: Path, mlflow_server: MLflowServer) -> None:
    name = f"tracked-{uuid.uuid4().hex[:6]}"
    spec = tracked_sweep(tmp_path, name, mlflow_server.uri)
    result = subprocess.run([*KUBETRAIN, "sweep", "run", "-f", str(spec), "-o", "json"], env=quiet_env(), cwd=REPO,
                            capture_output=True, text=True, timeout=540, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = json.loads(result.stdout)["trials"]
    assert [t["state"] for t in trials] == ["complete", "complete"], trials

    client = mlflow_server.client()
    experiment = client.get_experiment_by_name(name)  # the sweep's experiment, not one per trial
    assert experiment is not None
    runs = {run.data.tags["kubetrain.trial"]: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["0", "1"], runs
    for trial in trials:
        run = runs[str(trial["trial"])]
        assert run.info.run_name == f"{name}-t{trial['trial']}" and run.info.status == "FINISHED"
        assert run.data.tags["kubetrain.sweep"] == name
        assert float(run.data.params["train.lr"]) == trial["params"]["train.lr"]
        assert run.data.metrics["eval_accuracy"] == pytest.approx(trial["objective"])

        board = EventAccumulator(str(tmp_path / "tb" / name / f"trial-{trial['trial']}"))
        board.Reload()
        assert board.Scalars("eval_accuracy")[-1].value == pytest.approx(trial["objective"], abs=1e-6)
