"""The progress of a job from the runtime's metrics lines (kubetrain.metrics). Pure, torch- and rich-free.

One tracker serves the controller (status.progress), the terminal renderer (`kubetrain run`, `logs -f`,
`submit --follow`) and its final summary:

    step 40/480 (8%) · epoch 2 · loss 0.4100 · 1,234 samples/s · lr 3e-04 · gpu 12.3 GiB · ETA 12m03s
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kubetrain.metrics import parse_metrics_line

WINDOW = 8  # train records used for the step rate behind the ETA
SMOOTHING = 0.3  # weight of the newest loss in the smoothed loss (an exponential moving average)


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


_NUMBERS: frozenset[Any] = frozenset((int, float))  # not bool: True is no step count


def _number(record: dict[str, Any], key: str) -> float | None:
    value: Any = record.get(key)
    # float() is a C call; typing.cast here was a Python call per field, a sixth of the renderer's time
    return float(value) if value.__class__ in _NUMBERS else None


class ProgressTracker:
    """Feed it log lines (prefixed or not); `line()` is the current progress text, None before any metrics."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.status: str | None = None
        self._points: deque[tuple[float, float]] = deque(maxlen=WINDOW)  # (time, step) of train records
        self.smoothed_loss: float | None = None
        self.eval: dict[str, Any] | None = None  # the last eval record
        self.best_eval: dict[str, Any] | None = None  # highest accuracy (else lowest eval loss)
        self.restarts = 0  # start records after the first: the worker group was restarted
        self.checkpoint: str | None = None  # path of the last committed checkpoint
        self.times: dict[str, float] = {}  # first start, first train and end record times (Unix seconds)
        self._rate_sum, self._rate_count = 0.0, 0  # samples/s of every train record, for the mean throughput

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
            self._train(record)
            return True
        self._note(kind, record)
        if kind in ("end", "resume", "checkpoint", "eval"):
            self.status = _status(record)
            if kind == "end" and self.last is not None and _number(record, "step") is not None:
                # Train records come every logEvery steps, so the last one is short of the total (97 %);
                # the end record carries the final step.
                self.last = {**self.last, "step": record["step"]}
            return True
        return False

    def _train(self, record: dict[str, Any]) -> None:
        """The hot path (one call per train line, up to 100k/s): each field is read once."""
        step, when = _number(record, "step"), _number(record, "time")
        if step is not None and when is not None:
            if self._points and step < self._points[-1][1]:
                self._points.clear()  # restarted from an earlier checkpoint
            self._points.append((when, step))
            if "train" not in self.times:
                self.times["train"] = when
        loss = _number(record, "loss")
        if loss is not None:
            old = self.smoothed_loss
            self.smoothed_loss = loss if old is None else SMOOTHING * loss + (1 - SMOOTHING) * old
        rate = _number(record, "samples_per_s")
        if rate is not None:
            self._rate_sum += rate
            self._rate_count += 1
        self.last = record
        self.status = None

    def _note(self, kind: Any, record: dict[str, Any]) -> None:
        """The history behind the live line's extras and the final summary (records other than train)."""
        when = _number(record, "time")
        if kind in ("start", "end") and when is not None:
            self.times.setdefault(str(kind), when)
            if kind == "end":
                self.times["end"] = when
        if kind == "start" and "start" in self.times and when != self.times["start"]:
            self.restarts += 1
        elif kind == "eval":
            self.eval = record
            if _better(record, self.best_eval):
                self.best_eval = record
        elif kind == "checkpoint" and isinstance(record.get("path"), str):
            self.checkpoint = record["path"]

    def mean_samples_per_second(self) -> float | None:
        return self._rate_sum / self._rate_count if self._rate_count else None

    def live_line(self) -> str | None:
        """The terminal's live line: progress with the smoothed loss, last held-out accuracy, restarts."""
        if self.last is None:
            return self.status
        record = dict(self.last)
        if self.smoothed_loss is not None:
            record["loss"] = self.smoothed_loss
        parts = [format_progress(record, self.steps_per_second())]
        accuracy = _number(self.eval or {}, "eval_accuracy")
        if accuracy is not None:
            parts.append(f"eval acc {accuracy:.4f}")
        if self.restarts:
            parts.append(f"{self.restarts} restart{'s' if self.restarts > 1 else ''}")
        if self.status and not self.status.startswith("eval"):
            parts.append(self.status)
        return " · ".join(parts)

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


def _better(record: dict[str, Any], best: dict[str, Any] | None) -> bool:
    """Is this eval better than the best so far: higher accuracy, or lower loss without accuracies."""
    if best is None:
        return True
    accuracy, best_accuracy = _number(record, "eval_accuracy"), _number(best, "eval_accuracy")
    if accuracy is not None and best_accuracy is not None:
        return accuracy > best_accuracy
    loss, best_loss = _number(record, "eval_loss"), _number(best, "eval_loss")
    return loss is not None and (best_loss is None or loss < best_loss)


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
