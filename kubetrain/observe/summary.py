"""The final summary of a job's metrics: time, throughput, best and last eval, checkpoint, restarts. Pure."""

from __future__ import annotations

from typing import Any

from kubetrain.metrics import nonfinite_of
from kubetrain.observe.progress import ProgressTracker, format_duration
from kubetrain.observe.timeline import format_timeline, local_moments


def summary_rows(tracker: ProgressTracker, started: float, ended: float) -> list[tuple[str, str]]:
    """(label, value) rows; rows without data are left out."""
    rows = [("time", format_duration(ended - started))]
    if (diverged := tracker.divergence()) is not None:
        rows.insert(0, ("outcome", diverged))
    last = tracker.last or {}
    if last.get("step") is not None:
        total = last.get("total_steps")
        rows.append(("steps", f"{last['step']}/{total}" if total else f"{last['step']}"))
    if (rate := tracker.mean_samples_per_second()) is not None:
        rows.append(("throughput", f"{rate:,.0f} samples/s (mean)"))
    if tracker.diverged is not None and tracker.diverged[1] == "loss":
        before = f"; {tracker.smoothed_loss:.4f} smoothed before" if tracker.smoothed_loss is not None else ""
        rows.append(("loss", f"{tracker.diverged[2]} (last logged{before})"))
    elif tracker.smoothed_loss is not None:
        rows.append(("loss", f"{tracker.smoothed_loss:.4f} (smoothed)"))
    if tracker.skipped_steps:
        rows.append(("skipped steps", f"{tracker.skipped_steps} (non-finite loss, spec.divergence.policy skip)"))
    if tracker.best_eval is not None:
        rows.append(("best eval", _eval_text(tracker.best_eval)))
    if tracker.eval is not None:
        rows.append(("last eval", _eval_text(tracker.eval)))
    if tracker.checkpoint:
        rows.append(("checkpoint", tracker.checkpoint))
    rows += [(f"run ({name})", url) for name, url in sorted(tracker.runs.items())]  # spec.tracking's pages
    if tracker.restarts:
        rows.append(("restarts", str(tracker.restarts)))
    return rows


def timeline_of(tracker: ProgressTracker, started: float, ended: float) -> str:
    return format_timeline(local_moments(tracker, started, ended))


def _eval_text(record: dict[str, Any]) -> str:
    parts = []
    if isinstance(record.get("eval_accuracy"), int | float):
        parts.append(f"accuracy {record['eval_accuracy']:.4f}")
    if isinstance(record.get("eval_loss"), int | float):
        parts.append(f"loss {record['eval_loss']:.4f}")
    elif value := nonfinite_of(record, "eval_loss"):
        parts.append(f"loss {value}")
    parts.append(f"epoch {record.get('epoch')}, step {record.get('step')}")
    return " · ".join(parts)
