"""The progress of a job from the runtime's metrics lines (kubetrain.metrics). Pure, torch- and rich-free.

One tracker serves the controller (status.progress), the terminal renderer (`kubetrain run`, `logs -f`,
`submit --follow`) and its final summary:

    step 40/480 (8%) · epoch 2 · loss 0.4100 · 1,234 samples/s · lr 3e-04 · gpu 12.3 GiB · ETA 12m03s

The first non-finite loss or held-out loss (a record's `nonfinite` map, or the runtime's `end` record with
status diverged) makes the job diverged: the line then shows `loss nan` and `diverged at step N: loss nan`,
never the last finite loss, whatever comes after (a plain script may keep printing).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from kubetrain.metrics import diverged_text, nonfinite_of, parse_metrics_line

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
        self.diverged: tuple[Any, str, str] | None = None  # (step, field, "nan"/"inf"/"-inf") of the first one
        self.skipped_steps = 0  # non-finite steps the runtime skipped (spec.divergence.policy skip)
        self.runs: dict[str, str] = {}  # the tracked runs' pages (spec.tracking), tracker name to URL

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
        elif "nonfinite" in record:
            self._diverged(record, "loss")
        if "skipped_steps" in record and (skipped := _number(record, "skipped_steps")) is not None:
            self.skipped_steps = int(skipped)
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
            self._diverged(record, "eval_loss")
            if _better(record, self.best_eval):
                self.best_eval = record
        elif kind == "end":
            self._diverged(record, "loss")
            self._diverged(record, "eval_loss")
        elif kind == "checkpoint" and isinstance(record.get("path"), str):
            self.checkpoint = record["path"]
        elif kind == "tracking" and isinstance(record.get("runs"), dict):
            self.runs.update({str(k): str(v) for k, v in record["runs"].items() if isinstance(v, str)})

    def _diverged(self, record: dict[str, Any], field: str) -> None:
        if self.diverged is None and (value := nonfinite_of(record, field)) is not None:
            self.diverged = (record.get("step"), field, value)

    def divergence(self) -> str | None:
        """`diverged at step 8: loss nan`, or None."""
        return diverged_text(*self.diverged) if self.diverged else None

    def mean_samples_per_second(self) -> float | None:
        return self._rate_sum / self._rate_count if self._rate_count else None

    def live_line(self) -> str | None:
        """The terminal's live line: progress with the smoothed loss, last held-out accuracy, restarts."""
        if self.last is None:
            return self.status
        record = self._shown()
        if self.smoothed_loss is not None and self.diverged is None:
            record["loss"] = self.smoothed_loss
        parts = [format_progress(record, None if self.diverged else self.steps_per_second())]
        accuracy = _number(self.eval or {}, "eval_accuracy")
        if accuracy is not None:
            parts.append(f"eval acc {accuracy:.4f}")
        if self.restarts:
            parts.append(f"{self.restarts} restart{'s' if self.restarts > 1 else ''}")
        parts += self._outcome()
        return " · ".join(parts)

    def _shown(self) -> dict[str, Any]:
        """The last train record, with the step of a later end record, and the non-finite loss once
        diverged (a diverged end record carries the value of a step that never logged one)."""
        assert self.last is not None
        record = dict(self.last)
        if self.diverged is not None and self.diverged[1] == "loss":
            record["loss"] = None
            record["nonfinite"] = {"loss": self.diverged[2]}
        return record

    def _outcome(self) -> list[str]:
        """The line's tail: skipped steps, then the divergence, or the status of the last record."""
        parts = []
        if self.skipped_steps:
            parts.append(f"{self.skipped_steps} non-finite step{'s' if self.skipped_steps > 1 else ''} skipped")
        if self.diverged is not None:
            parts.append(diverged_text(*self.diverged))
        elif self.status and not self.status.startswith("eval"):
            parts.append(self.status)
        return parts

    def steps_per_second(self) -> float | None:
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def line(self) -> str | None:
        if self.last is None:
            return self.divergence() or self.status
        text = format_progress(self._shown(), None if self.diverged else self.steps_per_second())
        tail = self._outcome() if self.diverged or self.skipped_steps else [self.status] if self.status else []
        return " · ".join([text, *tail])


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
    elif loss is None and (value := nonfinite_of(record, "loss")):
        parts.append(f"loss {value}")
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
    if isinstance(eval_loss, int | float):
        return f"eval loss {eval_loss:.4f}"
    value = nonfinite_of(record, "eval_loss")
    return f"eval loss {value}" if value else "evaluated"
