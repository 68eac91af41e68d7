"""The Sweep resource and kubetrain.yaml, each made from the other; a trial's TrainingJob; a trial's objective
values read from its log tail by the controller's progress reader."""

from __future__ import annotations

from pathlib import Path

from kubetrain.controller.statusprogress import objective_of
from kubetrain.jobspec.load import load_spec
from kubetrain.kube.objects import OBJECTIVE_ANNOTATION, SWEEP_LABEL, TRIAL_LABEL
from kubetrain.metrics import format_metrics
from kubetrain.sweeps.resource import load_sweep, sweep_of, sweep_resource, trial_resource

SPEC = """\
apiVersion: kubetrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: digits}
spec:
  image: ghcr.io/kubetrain/digits:0.1.0
  train: {model: digits_task:build_model, dataset: digits_task:build_datasets, epochs: 2}
  checkpoint: {dir: /ckpt/digits}
  volumes: [{name: ckpt, claim: digits-ckpt, mountPath: /ckpt}]
sweep:
  parameters:
    - {name: train.lr, choice: [0.01, 0.1]}
    - {name: width, int: [8, 9], env: WIDTH}
  objective: {metric: eval_accuracy, goal: max}
  search: {algorithm: grid}
  parallelism: 2
"""


def test_a_sweep_resource_round_trips_and_owns_its_trials(tmp_path: Path) -> None:
    path = tmp_path / "kubetrain.yaml"
    path.write_text(SPEC)
    job = load_spec(str(path)).job
    resource = sweep_resource(job, "team-a")
    assert resource["kind"] == "Sweep" and resource["metadata"] == {"name": "digits", "namespace": "team-a"}
    assert resource["spec"]["parallelism"] == 2 and resource["spec"]["trial"]["image"].endswith("digits:0.1.0")
    resource["metadata"]["uid"] = "u-1"
    again = load_sweep(resource)
    assert again.sweep == job.sweep and again.spec == job.spec
    trial = trial_resource(again, resource, 3, {"train.lr": 0.1, "width": 9})
    meta = trial["metadata"]
    assert meta["name"] == "digits-t3" and meta["namespace"] == "team-a"
    assert meta["labels"] == {SWEEP_LABEL: "digits", TRIAL_LABEL: "3"}
    assert meta["annotations"] == {OBJECTIVE_ANNOTATION: "eval_accuracy"}
    assert meta["ownerReferences"][0]["uid"] == "u-1" and meta["ownerReferences"][0]["controller"] is True
    assert trial["spec"]["train"]["lr"] == 0.1 and trial["spec"]["env"]["WIDTH"] == "9"
    assert trial["spec"]["checkpoint"]["dir"] == "/ckpt/digits/trial-3"
    assert sweep_of(trial) == ("team-a", "digits")


def test_objective_values_by_step_add_up_across_log_tails() -> None:
    first = [format_metrics("eval", rank=0, step=10, eval_accuracy=0.5), "noise",
             format_metrics("train", rank=0, step=15, loss=0.3)]
    before = objective_of(first, "eval_accuracy", None)
    assert before == {"metric": "eval_accuracy", "step": 10, "value": 0.5, "intermediate": [[10, 0.5]]}
    later = objective_of([format_metrics("eval", rank=0, step=20, eval_accuracy=0.75)], "eval_accuracy", before)
    assert later == {"metric": "eval_accuracy", "step": 20, "value": 0.75, "intermediate": [[10, 0.5], [20, 0.75]]}
    assert objective_of(first, "val_loss", None) is None
