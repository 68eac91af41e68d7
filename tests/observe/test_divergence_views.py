"""A diverged run looks diverged everywhere: the live line, the summary, the HTML report (in real Chromium),
the operator's status.progress and TrainingJob conditions show nan/inf and "diverged at step N", never the
last finite loss."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.controller import mirror
from kubetrain.controller.reconcile import desired
from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.controller.statusprogress import progress_of
from kubetrain.metrics import format_metrics
from kubetrain.observe.history import from_lines, table_text
from kubetrain.observe.render import Renderer
from tests.observe.test_metrics_cli import chromium


def train(step: int, loss: float, **extra: Any) -> str:
    return "[node-1 rank-0] " + format_metrics("train", rank=0, step=step, total_steps=12, epoch=1, loss=loss,
                                               samples_per_s=100.0, lr=0.1, time=1000.0 + step, **extra)


def rendered(lines: list[str]) -> tuple[Renderer, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, live=False, interval=0.0)
    for line in lines:
        renderer.line(line)
    renderer.close()
    progress = [line for line in err.getvalue().splitlines() if line.startswith("progress: ")]
    return renderer, progress, err.getvalue()


def script_that_turns_nan() -> list[str]:
    """A plain script's metrics lines: finite losses, then NaN from step 8 on, then a NaN held-out loss."""
    return [*(train(step, 1.0 / step) for step in range(1, 8)), train(8, float("nan")), train(9, float("nan")),
            "[node-1 rank-0] " + format_metrics("eval", rank=0, step=9, epoch=1, eval_loss=float("nan"),
                                                eval_accuracy=0.33, samples=32)]


def test_the_live_line_and_summary_say_nan_and_where_it_diverged() -> None:
    renderer, progress, text = rendered(script_that_turns_nan())
    assert "loss nan" in progress[-1] and "diverged at step 8: loss nan" in progress[-1]
    assert "0.1" not in progress[-1].split("loss", 1)[1].split("·", 1)[0]  # not the last finite (smoothed) loss
    summary = text.split("training summary", 1)[1]
    assert "diverged at step 8: loss nan" in summary and "loss nan" in summary.split("last eval", 1)[1]
    assert renderer.tracker.divergence() == "diverged at step 8: loss nan"


def test_the_trainers_diverged_end_and_an_infinite_loss() -> None:
    lines = [*(train(step, 0.5) for step in range(1, 8)),
             "[node-1 rank-0] " + format_metrics("end", rank=0, status="diverged", step=8, epoch=1,
                                                 loss=float("inf"))]
    _, progress, text = rendered(lines)
    assert "step 8/12" in progress[-1] and "loss inf" in progress[-1]
    assert progress[-1].endswith("diverged at step 8: loss inf") and "training completed" not in text
    history = from_lines("run", lines)  # `kubetrain metrics`: the end record alone carries the value
    assert history.diverged("loss") == (8.0, "inf") and "DIVERGED: loss is inf from step 8" in table_text(history)


def test_skipped_steps_are_shown_and_are_no_divergence() -> None:
    renderer, progress, _ = rendered([train(4, 0.5), train(5, 0.4, skipped_steps=2)])
    assert "2 non-finite steps skipped" in progress[-1] and renderer.tracker.divergence() is None


def test_status_progress_and_the_diverged_condition() -> None:
    progress = progress_of([line.split("] ", 1)[1] for line in script_that_turns_nan()])
    assert progress is not None
    assert (progress["loss"], progress["diverged"]) == ("nan", "diverged at step 8: loss nan")
    assert "diverged at step 8: loss nan" in progress["line"]
    obj = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "mnist", "namespace": "ml", "uid": "u-1", "generation": 1},
           "spec": {"image": "ghcr.io/acme/t:1", "command": ["python", "t.py"]},
           "status": {"phase": "Running", "progress": {**progress, "updateTime": "2026-01-01T00:02:00Z"}}}
    child = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
             "metadata": {"name": "mnist", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
             "status": {"conditions": [{"type": "Running", "status": "True"}], "startTime": "2026-01-01T00:00:01Z"}}
    status = mirror.status_for(obj, desired(obj, ["pytorchjob"]), child, [])
    TrainingJobStatus.model_validate(status)
    diverged = [c for c in status["conditions"] if c["type"] == "Diverged"]
    assert [(c["status"], c["reason"], c["message"]) for c in diverged] == [
        ("True", "NonFiniteLoss", "diverged at step 8: loss nan")]
    assert ("Warning", "Diverged", "diverged at step 8: loss nan") in mirror.transitions(obj["status"], status)


def test_the_html_report_marks_the_divergence_in_chromium(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("\n".join(script_that_turns_nan()) + "\n")
    report = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["metrics", "--local", str(log), "--no-plots", "--html", str(report)])
    assert result.exit_code == 0, result.output
    browser = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120, check=False).stdout
    marks = dom.split('data-diverged="', 1)[1].split('"', 1)[0].replace("&quot;", '"')
    assert json.loads(marks) == {"loss": "diverged at step 8: loss nan",
                                 "eval loss": "diverged at step 9: eval_loss nan"}
    assert "DIVERGED" in dom.split('id="diverged"', 1)[1].split("</", 1)[0]


def test_endings_carry_their_cause() -> None:
    from kubetrain.cli.run_cmd import ending
    from kubetrain.controller.handoff import diverged_of

    assert ending(0, None) == "succeeded"
    assert ending(65, "diverged at step 8: loss nan") == "diverged at step 8: loss nan; exit code 65"
    assert ending(143, None) == "exited with 143 (stopped by SIGTERM)"
    assert ending(130, "diverged at step 8: loss nan") == (
        "exited with 130 (stopped by SIGINT; diverged at step 8: loss nan)")
    assert ending(3, None) == "exited with 3"
    done = {"status": {"phase": "Succeeded", "conditions": [
        {"type": "Diverged", "status": "True", "reason": "NonFiniteLoss", "message": "diverged at step 8: loss nan"}]}}
    assert diverged_of(done) == "diverged at step 8: loss nan" and diverged_of({"status": {}}) is None
