"""The metrics history of a job: every metrics line of its log(s), as tables, CSV, JSON and series. Pure.

Lines are parsed with the one parser (kubetrain.metrics.parse_metrics_line), so a history can come from
`kubetrain logs`, a `kubetrain run --log-dir` directory, an archive, or any file holding the lines.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.errors import UsageError
from kubetrain.metrics import PREFIX, parse_metrics_line

COLUMNS = ("kind", "step", "epoch", "loss", "eval_loss", "eval_accuracy", "samples_per_s", "lr", "time")
SERIES = {  # chart title -> (kind of record, field)
    "loss": ("train", "loss"),
    "eval loss": ("eval", "eval_loss"),
    "eval accuracy": ("eval", "eval_accuracy"),
    "samples/s": ("train", "samples_per_s"),
    "learning rate": ("train", "lr"),
}
NONFINITE = ("nan", "inf", "-inf")
MAX_FILE_BYTES = 1 << 30  # a log file larger than this is read in part only (the reader streams lines)


@dataclass
class History:
    name: str
    records: list[dict[str, Any]] = field(default_factory=list)

    def series(self, title: str) -> tuple[list[float], list[float]]:
        """(steps, values) of one SERIES entry; records without a number are skipped."""
        kind, key = SERIES[title]
        xs, ys = [], []
        for record in self.records:
            value: Any = record.get(key)
            step: Any = record.get("step")
            if record.get("kind") == kind and _is_number(value) and _is_number(step):
                xs.append(float(step))
                ys.append(float(value))
        return xs, ys

    def rows(self) -> list[dict[str, Any]]:
        """train and eval records, one row each, in COLUMNS; a non-finite value is its text ("nan", "inf")."""
        return [{c: _value(r, c) for c in COLUMNS} for r in self.records if r.get("kind") in ("train", "eval")]

    def diverged(self, title: str) -> tuple[float, str] | None:
        """(step, "nan"/"inf"/"-inf") of the first non-finite value of one SERIES entry, or None. The runtime's
        `end` record of a diverged run counts too: under spec.divergence.policy stop the non-finite loss of
        the step it stopped at is only there."""
        kind, key = SERIES[title]
        for record in self.records:
            text = _nonfinite(record).get(key)
            if record.get("kind") in (kind, "end") and text and _is_number(record.get("step")):
                return float(record["step"]), text
        return None


def _nonfinite(record: dict[str, Any]) -> dict[str, str]:
    found = record.get("nonfinite")
    if not isinstance(found, dict):
        return {}
    return {key: text for key, text in found.items() if text in NONFINITE}


def _value(record: dict[str, Any], column: str) -> Any:
    value = record.get(column)
    return _nonfinite(record).get(column) if value is None else value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def from_lines(name: str, lines: Iterable[str]) -> History:
    history = History(name)
    for line in lines:
        if PREFIX in line and (record := parse_metrics_line(line)) is not None:
            history.records.append(record)
    return history


def from_local(path: Path) -> History:
    """A file, or a directory of *.log files (e.g. `kubetrain run --log-dir DIR`), read line by line."""
    if not path.exists():
        raise UsageError(f"--local {path}: no such file or directory")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*.log") if p.is_file())
    if not files:
        raise UsageError(f"--local {path}: no *.log files in it")
    return from_lines(path.name, (line for f in files for line in _read_lines(f)))


def _read_lines(path: Path) -> Iterable[str]:
    read = 0
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            read += len(line)
            if read > MAX_FILE_BYTES:
                return
            yield line


def to_csv(history: History) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(history.rows())
    return out.getvalue()


def to_json(history: History) -> str:
    return json.dumps({"name": history.name, "records": history.records}, indent=2) + "\n"


def table_text(history: History, limit: int = 30) -> str:
    """A fixed-width table of the train/eval rows (the last `limit`)."""
    rows = history.rows()[-limit:]
    header = ("KIND", "STEP", "EPOCH", "LOSS", "EVAL LOSS", "EVAL ACC", "SAMPLES/S", "LR")
    lines = [header] + [(str(r["kind"]), _fmt(r["step"]), _fmt(r["epoch"]), _fmt(r["loss"], ".4f"),
                         _fmt(r["eval_loss"], ".4f"), _fmt(r["eval_accuracy"], ".4f"),
                         _fmt(r["samples_per_s"], ",.0f"), _fmt(r["lr"], ".2e")) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    table = "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                      for line in lines) + "\n"
    for title in ("loss", "eval loss"):
        if found := history.diverged(title):
            table += f"DIVERGED: {title} is {found[1]} from step {found[0]:.0f}\n"
    return table


def _fmt(value: Any, spec: str = "") -> str:
    """A cell: "-" when not logged, "nan"/"inf" when non-finite, "?" for a value that is no number."""
    if value is None:
        return "-"
    if value in NONFINITE:
        return str(value)
    if not _is_number(value):
        return "?" if spec else _short(value)
    if spec and abs(value) >= 1e15:
        return format(value, ".3g")
    return format(value, spec) if spec else str(value)


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 20 else text[:19] + "…"
