"""The metrics line format (torch-free): what `kubetrain submit --follow` parses."""

from __future__ import annotations

import json
import math

import pytest

from kubetrain.metrics import KINDS, PREFIX, format_metrics, parse_metrics_line


def test_round_trip_keeps_every_field() -> None:
    line = format_metrics("train", rank=0, step=40, epoch=2, loss=0.125, samples_per_s=812.5, lr=3e-4,
                          gpu_mem_mb=None)
    assert line.startswith(PREFIX) and "\n" not in line
    record = parse_metrics_line(line)
    assert record is not None
    assert record["kind"] == "train" and record["step"] == 40 and record["loss"] == 0.125
    assert record["gpu_mem_mb"] is None and isinstance(record["time"], float)


def test_prefix_after_log_decoration_still_parses() -> None:
    line = "[node-2 rank-3] " + format_metrics("eval", rank=3, eval_accuracy=0.97)
    assert parse_metrics_line(line) == json.loads(line.split(PREFIX, 1)[1])


@pytest.mark.parametrize("line", [
    "", "epoch 1 loss 0.3", PREFIX, PREFIX + "{not json", PREFIX + "[1, 2]", PREFIX + '{"step": 1}',
    PREFIX + '{"kind": 3}',
])
def test_other_lines_are_not_metrics(line: str) -> None:
    assert parse_metrics_line(line) is None


def test_non_finite_numbers_become_null() -> None:
    record = parse_metrics_line(format_metrics("train", loss=math.nan, lr=math.inf))
    assert record is not None and record["loss"] is None and record["lr"] is None


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown metrics kind"):
        format_metrics("progress")
    assert set(KINDS) >= {"start", "train", "eval", "checkpoint", "resume", "end"}
