"""`kubetrain metrics --local`: table, plots, CSV, JSON, --compare, errors; the HTML report in real Chromium."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.metrics import format_metrics
from tests.conftest import in_ci


def run(*argv: str) -> Any:
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def write_run(path: Path, steps: int, evals: int) -> Path:
    """A --log-dir-like directory: rank 0's stdout.log with `steps` train and `evals` eval records."""
    lines = ["[rank-0]: starting"]
    lines += ["[rank-0]:" + format_metrics("train", rank=0, step=s, total_steps=steps, epoch=1, loss=1.0 / s,
                                           samples_per_s=100.0 + s, lr=0.01) for s in range(1, steps + 1)]
    lines += ["[rank-0]:" + format_metrics("eval", rank=0, step=e, epoch=e, eval_loss=0.5 / e, eval_accuracy=0.9,
                                           samples=10) for e in range(1, evals + 1)]
    log = path / "node-1" / "attempt_0" / "0" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\nnot json: KUBETRAIN_METRICS {oops\n")
    return path


def test_table_plots_csv_json_and_compare(tmp_path: Path) -> None:
    a, b = write_run(tmp_path / "a", 12, 3), write_run(tmp_path / "b", 8, 2)
    table = run("metrics", "--local", str(a))
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["KIND", "STEP", "EPOCH", "LOSS", "EVAL", "LOSS", "EVAL", "ACC", "SAMPLES/S", "LR"]
    assert lines[1].split()[:4] == ["train", "1", "1", "1.0000"]
    assert "loss / step" in table.stdout and "eval accuracy / step" in table.stdout  # plotext charts
    rows = list(csv.DictReader(io.StringIO(run("metrics", "--local", str(a), "-o", "csv").stdout)))
    assert len(rows) == 15 and rows[-1]["kind"] == "eval" and rows[-1]["eval_accuracy"] == "0.9"
    doc = json.loads(run("metrics", "--local", str(a), "-o", "json").stdout)
    assert doc["name"] == "a" and len(doc["records"]) == 15  # the broken line is ignored
    both = list(csv.DictReader(io.StringIO(run("metrics", "--local", str(a), "--compare", str(b), "-o", "csv").stdout)))
    assert {r["run"] for r in both} == {"a", "b"} and len(both) == 15 + 10
    overlay = run("metrics", "--local", str(a), "--compare", str(b))
    assert "== a" in overlay.stdout and "== b" in overlay.stdout


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    for argv, message in ((["metrics"], "give a job NAME or --local PATH"),
                          (["metrics", "x", "--local", str(tmp_path)], "give a job NAME or --local PATH"),
                          (["metrics", "--local", str(tmp_path / "missing")], "no such file or directory"),
                          (["metrics", "--local", str(tmp_path)], "no *.log files")):
        result = run(*argv)
        assert result.exit_code == 2 and message in result.stderr and "Traceback" not in result.output


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if in_ci():
            pytest.fail("chromium is missing but CI=true: `make testenv` installs it (prepare-browser.sh)")
        pytest.skip("chromium is not installed (bash tests/testenv/prepare-browser.sh)")
    return found


def test_html_report_renders_in_chromium(tmp_path: Path) -> None:
    browser = chromium()
    a, b = write_run(tmp_path / "a", 12, 3), write_run(tmp_path / "b", 8, 2)
    report = tmp_path / "report.html"
    result = run("metrics", "--local", str(a), "--compare", str(b), "--html", str(report), "-o", "json")
    assert result.exit_code == 0 and f"wrote {report}" in result.stderr
    text = report.read_text()
    assert "http://" not in text.split("<!--")[0].split("<script>", 1)[0] and "<script src" not in text
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", report.as_uri()], capture_output=True, text=True,
                         timeout=120, check=False).stdout
    rendered = dom.split('data-rendered="', 1)[1].split('"', 1)[0].replace("&quot;", '"')
    # both runs' points on each chart: 12 + 8 train records, 3 + 2 evals
    assert json.loads(rendered) == {"loss": 20, "eval loss": 5, "eval accuracy": 5, "samples/s": 20,
                                    "learning rate": 20}
    shot = tmp_path / "report.png"
    subprocess.run([browser, *flags, "--window-size=1200,900", f"--screenshot={shot}", report.as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.stat().st_size > 10_000
