"""`kubetrain sweep`: its mistakes are one line and exit 2; `best` and `--promote` from a saved state; the results
table and data (no torch, no trial run: the state is written here)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.jobspec.load import load_spec
from kubetrain.sweeps.engine import Engine
from kubetrain.sweeps.state import SweepState
from kubetrain.sweeps.table import format_table
from tests.jobspec.test_sweep_spec import TRAINER

SPEC = TRAINER.split("sweep:")[0] + textwrap.dedent("""\
    sweep:
      search: {algorithm: grid}
      parameters: [{name: train.lr, choice: [0.1, 0.01, 0.001]}]
      objective: {metric: eval_accuracy, goal: max}
    """)


def saved_sweep(tmp_path: Path) -> Path:
    """A spec whose last local sweep ended: trial 1 best (0.9), trial 2 pruned, trial 0 at 0.8."""
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(SPEC)
    loaded = load_spec(str(spec))
    assert loaded.job.sweep is not None
    engine, state = Engine(loaded.job.sweep), SweepState(started=100.0)
    for value, outcome in ((0.8, "complete"), (0.9, "complete"), (0.1, "pruned")):
        trial = engine.suggest(state, 100.0)
        assert trial is not None
        engine.report(state, trial.number, 10, value)
        engine.finish(state, trial.number, outcome, 160.0)
    folder = tmp_path / ".kubetrain" / "sweeps" / "digits"
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(state.to_json())
    return spec


def test_a_spec_without_a_sweep_and_a_sweep_never_run_are_one_line_errors(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text(SPEC.split("sweep:")[0])
    result = CliRunner().invoke(cli, ["sweep", "run", "-f", str(plain)])
    assert (result.exit_code, result.output) == (2, f"error: {plain}: no `sweep` section (docs/sweeps.md)\n")
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec)])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "run `kubetrain sweep run` first" in result.output


def test_best_prints_the_winner_and_promote_writes_a_plain_spec(tmp_path: Path) -> None:
    spec = saved_sweep(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["best"]["trial"] == 1 and data["best"]["params"] == {"train.lr": 0.01}
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec), "--promote", "-"])
    assert result.exit_code == 0, result.output
    promoted = yaml.safe_load(result.output)
    assert "sweep" not in promoted and promoted["metadata"]["name"] == "digits"
    assert promoted["spec"]["train"]["lr"] == 0.01 and promoted["spec"]["checkpoint"]["dir"] == "/ckpt/digits"
    assert json.loads(promoted["spec"]["env"]["KUBETRAIN_PARAMS"]) == {"train.lr": 0.01}
    out = tmp_path / "best.yaml"
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec), "--promote", str(out)])
    assert result.exit_code == 0 and load_spec(str(out)).job.spec.train.lr == 0.01  # type: ignore[union-attr]


def test_the_table_shows_params_state_objective_and_best_so_far(tmp_path: Path) -> None:
    spec = saved_sweep(tmp_path)
    loaded = load_spec(str(spec))
    assert loaded.job.sweep is not None
    state = SweepState.from_json((tmp_path / ".kubetrain/sweeps/digits/state.json").read_text())
    running = Engine(loaded.job.sweep)
    state.trials[2].state, state.trials[2].step, state.trials[2].total_steps = "running", 25, 100
    state.trials[2].started = 100.0
    assert format_table(loaded.job.sweep, state, now=150.0) == [
        "TRIAL  PARAMETERS  STATE     STEP    OBJECTIVE  BEST SO FAR  ETA",
        "0      lr=0.1      complete  -       0.8        0.8          -",
        "1      lr=0.01     complete  -       0.9        0.9          -",
        "2      lr=0.001    running   25/100  0.1        0.9          2m30s",
    ]
    assert running.best(state) is state.trials[1]


def test_list_shows_a_sweeps_trials_as_one_row() -> None:
    from kubetrain.cli.status_cmd import _grouped
    from kubetrain.jobs.crud import JobSummary

    def job(name: str, state: str, sweep: str = "") -> JobSummary:
        return JobSummary(name, "ns", "pytorchjob", state, 1, 0, "2026-11-27T10:00:00Z", sweep=sweep)

    found = [job("a", "Running"), job("sw-t0", "Succeeded", "sw"), job("b", "Pending"), job("sw-t1", "Running", "sw"),
             job("sw-t2", "Running", "sw")]
    rows = [row[:3] for _, row in _grouped(found)]
    assert rows == [["a", "pytorchjob", "Running"], ["sweep/sw", "pytorchjob", "3 trials: 2 Running, 1 Succeeded"],
                    ["b", "pytorchjob", "Pending"]]
    assert job("sw-t0", "Succeeded", "sw").as_dict()["sweep"] == "sw" and "sweep" not in job("a", "Running").as_dict()


def test_list_counts_a_trial_being_deleted_as_terminating() -> None:
    """Deleted in the foreground, a pruned trial's job keeps its last conditions until its pods are gone."""
    from kubetrain.cli.status_cmd import _grouped
    from kubetrain.jobs.crud import summary
    from kubetrain.jobs.targets import PYTORCHJOB

    def job(name: str, condition: str, deleted: bool = False) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ns", "labels": {"kubetrain.dev/sweep": "sw"},
                "creationTimestamp": "2026-11-27T10:00:00Z"}
        if deleted:
            meta["deletionTimestamp"] = "2026-11-27T10:05:00Z"
        return {"kind": "PyTorchJob", "metadata": meta, "spec": {"pytorchReplicaSpecs": {}},
                "status": {"conditions": [{"type": condition, "status": "True"}]}}

    found = [summary(job("sw-t0", "Succeeded"), PYTORCHJOB), summary(job("sw-t1", "Running", deleted=True), PYTORCHJOB),
             summary(job("sw-t2", "Running"), PYTORCHJOB)]
    assert [row[2] for _, row in _grouped(found)] == ["3 trials: 1 Running, 1 Succeeded, 1 Terminating"]
    assert found[1].as_dict()["state"] == "Terminating"


def test_promote_keeps_an_existing_file_unless_forced_and_no_complete_trial_is_one_line(tmp_path: Path) -> None:
    spec = saved_sweep(tmp_path)
    out = tmp_path / "best.yaml"
    out.write_text("mine\n")
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec), "--promote", str(out)])
    assert (result.exit_code, result.output) == (2, f"error: {out} already exists (use --force to overwrite)\n")
    assert out.read_text() == "mine\n"
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec), "--promote", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert load_spec(str(out)).job.spec.train.lr == 0.01  # type: ignore[union-attr]

    state_file = tmp_path / ".kubetrain/sweeps/digits/state.json"
    state = SweepState.from_json(state_file.read_text())
    for trial in state.trials[:2]:
        trial.state, trial.value = "running", None
    state_file.write_text(state.to_json())
    result = CliRunner().invoke(cli, ["sweep", "best", "-f", str(spec), "--promote", "-"])
    assert (result.exit_code, result.output) == (
        1, "error: kubetrain.yaml: no trial has completed yet (2 running, 1 of 3 ended)\n")


def test_best_takes_a_sweeps_name_or_a_spec_file_not_both(tmp_path: Path) -> None:
    spec = saved_sweep(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", "best", "sw", "-f", str(spec)])
    assert (result.exit_code, result.output) == (
        2, "error: give a Sweep's NAME (in the cluster) or -f FILE (a local sweep), not both\n")
