"""The progress renderer on its own: what goes to stdout and stderr, at what rate (a fake clock)."""

from __future__ import annotations

import io

from kubetrain.metrics import format_metrics
from kubetrain.observe.render import Renderer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def train(step: int, loss: float = 1.0) -> str:
    return "[node-1 rank-0] " + format_metrics("train", rank=0, step=step, total_steps=100, epoch=1, loss=loss,
                                               samples_per_s=100.0, lr=0.1, time=1000.0 + step)


def test_plain_mode_bounded_rate_no_json_on_stdout() -> None:
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    renderer = Renderer(out, err, live=False, interval=10.0, clock=clock)
    renderer.line("[node-1 rank-0] hello from the user program")
    for step in range(1, 101):
        clock.now = step * 0.5  # 50 s of training, a metrics line every 0.5 s
        renderer.line(train(step, loss=1.0 / step))
    renderer.line("[node-1 rank-0] " + format_metrics("eval", rank=0, step=100, epoch=1, eval_loss=0.2,
                                                      eval_accuracy=0.9, samples=10))
    renderer.close()
    assert out.getvalue() == "[node-1 rank-0] hello from the user program\n"
    progress = [line for line in err.getvalue().splitlines() if line.startswith("progress: ")]
    assert 5 <= len(progress) <= 7, progress  # the first line, one per 10 s, the last one
    assert progress[0].startswith("progress: step 1/100 (1%) · epoch 1 · loss 1.0000")
    assert "eval acc 0.9000" in progress[-1] and "step 100/100" in progress[-1]
    summary = err.getvalue()
    assert "training summary" in summary and "accuracy 0.9000" in summary and "KUBETRAIN_METRICS" not in summary


def test_raw_keeps_metrics_lines_and_smooths_the_loss() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, raw=True, live=False)
    lines = [train(1, loss=2.0), train(2, loss=1.0)]
    for line in lines:
        renderer.line(line)
    renderer.close()
    assert out.getvalue().splitlines() == lines
    assert renderer.tracker.smoothed_loss == 0.3 * 1.0 + 0.7 * 2.0
    assert "1.7000 (smoothed)" in err.getvalue()


def test_restarts_and_checkpoint_in_the_summary() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, live=False)
    for when in (1000.0, 1010.0):
        renderer.line(format_metrics("start", rank=0, world_size=2, total_steps=100, time=when))
        renderer.line(train(5))
    renderer.line(format_metrics("checkpoint", rank=0, step=5, epoch=0, path="/ckpt/step-5.pt", reason="final"))
    renderer.close()
    assert renderer.tracker.restarts == 1
    text = err.getvalue()
    assert "1 restart" in text and "/ckpt/step-5.pt" in text


def test_no_metrics_no_summary() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, live=False)
    renderer.stdout.write("a\nb")
    renderer.stdout.write("c\n")
    renderer.close()
    assert out.getvalue() == "a\nbc\n" and err.getvalue() == ""


def test_a_flood_of_train_lines_is_sampled_never_waited_on() -> None:
    """Past BUSY_TRAIN train lines in one redraw window, the rest are only kept as the newest (not parsed);
    eval lines and user lines are never skipped, and the last train line counts at the end."""
    from kubetrain.observe.render import BUSY_TRAIN

    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    renderer = Renderer(out, err, raw=True, live=False, clock=clock)
    lines = [train(step, loss=1.0) for step in range(1, 3 * BUSY_TRAIN + 1)]
    for line in lines:  # all in one 0.1 s window
        renderer.line(line)
    assert renderer.tracker.last is not None and renderer.tracker.last["step"] == BUSY_TRAIN
    assert renderer.sampled == 2 * BUSY_TRAIN
    renderer.line("[node-1 rank-0] a user line")
    renderer.line("[node-1 rank-0] " + format_metrics("eval", rank=0, step=10, epoch=1, eval_accuracy=0.5))
    assert renderer.tracker.eval is not None
    clock.now = 0.2  # the next window: the newest skipped line is parsed first, then this one
    renderer.line(train(3 * BUSY_TRAIN + 1))
    assert renderer.tracker.last["step"] == 3 * BUSY_TRAIN + 1 and renderer.sampled == 2 * BUSY_TRAIN
    renderer.line(train(3 * BUSY_TRAIN + 2))
    renderer.close()
    assert renderer.tracker.last["step"] == 3 * BUSY_TRAIN + 2
    assert out.getvalue().count("KUBETRAIN_METRICS") == len(lines) + 3  # raw: every line still printed
    assert "[node-1 rank-0] a user line\n" in out.getvalue()
    flooded = Renderer(io.StringIO(), io.StringIO(), live=False, clock=Clock())
    for line in lines:
        flooded.line(line)
    flooded.close()  # the newest skipped line is parsed at the end: the summary has the last step
    assert flooded.tracker.last is not None and flooded.tracker.last["step"] == 3 * BUSY_TRAIN
