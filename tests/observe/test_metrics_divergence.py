"""`kubetrain metrics` shows what happened: a non-finite loss is marked as a divergence (not "-"), compared runs
differ without colour, nonsense values do not print verbatim, and an unwritable --html is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.metrics import PREFIX, format_metrics


def run(*argv: str) -> Any:
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def write_log(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def diverging(path: Path) -> Path:
    losses = [0.9, 0.7, float("nan"), float("nan")]
    return write_log(path, [format_metrics("train", rank=0, step=10 * (i + 1), epoch=1, loss=loss, lr=0.1)
                            for i, loss in enumerate(losses)])


def test_a_non_finite_loss_is_marked_as_a_divergence(tmp_path: Path) -> None:
    record = json.loads(format_metrics("train", step=30, loss=float("nan"), grad=float("-inf")).split(" ", 1)[1])
    assert (record["loss"], record["nonfinite"]) == (None, {"loss": "nan", "grad": "-inf"})  # still valid JSON
    result = run("metrics", "--local", str(diverging(tmp_path / "run.log")))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[1:5]]
    assert [row[3] for row in rows] == ["0.9000", "0.7000", "nan", "nan"]
    assert "DIVERGED: loss is nan from step 30" in result.stdout.splitlines()
    assert "loss / step  DIVERGED: nan from step 30" in result.stdout  # the chart says so too


def test_compared_runs_have_their_own_glyph_without_colour(tmp_path: Path) -> None:
    a = write_log(tmp_path / "a.log", [format_metrics("train", step=s, loss=1.0 / s) for s in range(1, 20)])
    b = write_log(tmp_path / "b.log", [format_metrics("train", step=s, loss=2.0 / s) for s in range(1, 20)])
    result = run("metrics", "--local", str(a), "--compare", str(b))  # CliRunner's stdout is not a terminal
    chart = result.stdout.split("loss / step", 1)[1]
    assert "• a.log" in chart and "x b.log" in chart
    assert chart.count("•") > 5 and chart.count("x") > 5


def test_nonsense_values_are_not_printed_verbatim(tmp_path: Path) -> None:
    nonsense = {"kind": "train", "step": 5, "epoch": [1, 2], "loss": "abc", "lr": 1e300, "samples_per_s": {"a": 1},
                "nonfinite": {"loss": "rm -rf"}}
    log = write_log(tmp_path / "run.log", [PREFIX + json.dumps(nonsense)])
    result = run("metrics", "--local", str(log))
    assert result.exit_code == 0, result.output
    row = result.stdout.splitlines()[1].split()
    assert row == ["train", "5", "[1,", "2]", "?", "-", "-", "?", "1e+300"]
    assert "rm -rf" not in result.stdout and "DIVERGED" not in result.stdout


@pytest.mark.parametrize("where", ["missing/dir/report.html", "readonly/report.html"])
def test_an_unwritable_html_report_is_one_line(tmp_path: Path, where: str) -> None:
    (tmp_path / "readonly").mkdir()
    os.chmod(tmp_path / "readonly", 0o500)
    if os.access(tmp_path / "readonly", os.W_OK) and where.startswith("readonly"):
        (tmp_path / "readonly").rmdir()  # root ignores the mode bits: a path under a regular file is unwritable
        (tmp_path / "readonly").write_text("")
    target = tmp_path / where
    result = CliRunner().invoke(cli, ["metrics", "--local", str(diverging(tmp_path / "run.log")), "--no-plots",
                                      "--html", str(target)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {target}: cannot write: ")
