"""The metrics line: how a training process reports progress on stdout. Torch-free, so the CLI can parse it.

A metrics line is the prefix ``KUBETRAIN_METRICS`` and one space, then one JSON object on the same line::

    KUBETRAIN_METRICS {"kind":"train","step":40,"total_steps":480,"epoch":2,"loss":0.41,...}

Anything before the prefix is ignored, so lines decorated by a log merger (``[node-1 rank-0] ``) or
by ``kubectl logs --prefix`` still parse. Every object has ``kind`` (see ``KINDS``), ``rank`` and ``time``;
the other fields per kind are listed in docs/runtime.md. Readers must ignore unknown fields (the format
only grows).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import orjson

PREFIX = "KUBETRAIN_METRICS "
"""The marker that starts the JSON part of a metrics line."""

KINDS = ("start", "train", "eval", "checkpoint", "resume", "end", "profile", "tracking")
EXIT_DIVERGED = 65
"""The exit code of a run whose loss became non-finite (spec.divergence): below 128, so the operator's
`restartPolicy: ExitCode` does not retry it (a retry resumes from the same checkpoint and diverges again)."""
NONFINITE_TEXTS = ("nan", "inf", "-inf")
"""start: set-up done, first step next; train: progress every `logEvery` optimizer steps; eval: held-out
results after an epoch; checkpoint: a checkpoint was committed; resume: state loaded from a checkpoint;
end: the loop finished (status completed) or stopped on a signal (status stopped); tracking: the pages of the
job's tracked runs (`runs`: tracker name to URL), once each is open."""


def _finite(value: Any) -> Any:
    """JSON has no NaN/Infinity: non-finite floats become null (a diverged loss still prints); which value it
    was goes to the record's `nonfinite` map (`{"loss": "nan"}`), so readers can tell a divergence from a
    value that was not logged."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def nonfinite_text(value: Any) -> str | None:
    """"nan", "inf" or "-inf" for a non-finite float, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return None


def diverged_text(step: Any, field: str, value: str) -> str:
    """The one wording of a divergence in every view: `diverged at step 8: loss nan`."""
    shown = f"{step:.0f}" if isinstance(step, int | float) and not isinstance(step, bool) else "?"
    return f"diverged at step {shown}: {field} {value}"


def nonfinite_of(record: dict[str, Any], field: str) -> str | None:
    """"nan", "inf" or "-inf" when a metrics record says `field` was non-finite, else None (never raises)."""
    found = record.get("nonfinite")
    text = found.get(field) if isinstance(found, dict) else None
    return text if text in NONFINITE_TEXTS else None


def format_metrics(kind: str, **fields: Any) -> str:
    """One metrics line (without a newline). ``time`` (Unix seconds) is added unless given."""
    if kind not in KINDS:
        raise ValueError(f"unknown metrics kind {kind!r}; expected one of {', '.join(KINDS)}")
    record: dict[str, Any] = {"kind": kind}
    record.update({key: _finite(value) for key, value in fields.items()})
    if nonfinite := {key: text for key, value in fields.items() if (text := nonfinite_text(value))}:
        record["nonfinite"] = nonfinite
    record.setdefault("time", round(time.time(), 3))
    return PREFIX + json.dumps(record, separators=(",", ":"), allow_nan=False)


def parse_metrics_line(line: str) -> dict[str, Any] | None:
    """The JSON object of a metrics line, or None if `line` is not one (never raises)."""
    index = line.find(PREFIX)
    if index < 0:
        return None
    try:  # orjson: ~2.5x json's decoder on these small objects; the renderer parses up to 100k lines/s
        record = orjson.loads(line[index + len(PREFIX):])  # trailing non-space text is an error, as it should
    except orjson.JSONDecodeError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return None
    return record
