"""The live progress line of a followed job, from the runtime's metrics lines (kubetrain.metrics). Pure.

    step 40/480 (8%) · epoch 2 · loss 0.4100 · 1,234 samples/s · lr 3e-04 · gpu 12.3 GiB · ETA 12m03s
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kubetrain.metrics import parse_metrics_line

WINDOW = 8  # train records used for the step rate behind the ETA


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class ProgressTracker:
    """Feed it log lines (prefixed or not); `line()` is the current progress text, None before any metrics."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.status: str | None = None
        self._points: deque[tuple[float, float]] = deque(maxlen=WINDOW)  # (time, step) of train records

    def feed(self, line: str) -> bool:
        """True if the line was a metrics line that changed the progress."""
        if "KUBETRAIN_METRICS" not in line:
            return False
        record = parse_metrics_line(line)
        if record is None:
            return False
        return self.update(record)

    def update(self, record: dict[str, Any]) -> bool:
        kind = record.get("kind")
        if kind == "train":
            step, when = _number(record, "step"), _number(record, "time")
            if step is not None and when is not None:
                if self._points and step < self._points[-1][1]:
                    self._points.clear()  # restarted from an earlier checkpoint
                self._points.append((when, step))
            self.last = record
            self.status = None
            return True
        if kind in ("end", "resume", "checkpoint", "eval"):
            self.status = _status(record)
            if kind == "end" and self.last is not None and _number(record, "step") is not None:
                # Train records come every logEvery steps, so the last one is short of the total (97 %);
                # the end record carries the final step.
                self.last = {**self.last, "step": record["step"]}
            return True
        return False

    def steps_per_second(self) -> float | None:
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def line(self) -> str | None:
        if self.last is None:
            return self.status
        text = format_progress(self.last, self.steps_per_second())
        return f"{text} · {self.status}" if self.status else text


def format_progress(record: dict[str, Any], steps_per_second: float | None = None) -> str:
    """One line from a `train` metrics record; ETA only when the step rate and total are known."""
    parts = []
    step, total = _number(record, "step"), _number(record, "total_steps")
    if step is not None:
        parts.append(f"step {step:.0f}/{total:.0f} ({100 * step / total:.0f}%)" if total else f"step {step:.0f}")
    if (epoch := _number(record, "epoch")) is not None:
        parts.append(f"epoch {epoch:.0f}")
    loss = record.get("loss", "")
    if isinstance(loss, int | float):
        parts.append(f"loss {loss:.4f}")
    elif loss is None:
        parts.append("loss nan")
    if (rate := _number(record, "samples_per_s")) is not None:
        parts.append(f"{rate:,.0f} samples/s")
    if (lr := _number(record, "lr")) is not None:
        parts.append(f"lr {lr:.1e}")
    if (memory := _number(record, "gpu_mem_mb")) is not None:
        parts.append(f"gpu {memory / 1024:.1f} GiB")
    if steps_per_second and step is not None and total and total > step:
        parts.append(f"ETA {format_duration((total - step) / steps_per_second)}")
    return " · ".join(parts)


def _status(record: dict[str, Any]) -> str:
    kind = record.get("kind")
    if kind == "end":
        return f"training {record.get('status', 'ended')}"
    if kind == "resume":
        return f"resumed at step {record.get('step')}"
    if kind == "checkpoint":
        return f"checkpoint at step {record.get('step')}"
    eval_loss = record.get("eval_loss")
    return f"eval loss {eval_loss:.4f}" if isinstance(eval_loss, int | float) else "evaluated"
