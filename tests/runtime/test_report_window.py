"""The throughput a metrics line reports covers the device's work, not just the host's launches.

On a GPU the training loop only queues kernels: the host reaches the end of a window while the device still
has steps to run, and the window's read is the first point that waits for them. A rate computed before that
wait counts only the launches (on an H100 it reported a GPT-2-small run 15-28 % faster than it ran). Here a
CPU stands in: the tensor-to-host conversion that a device would make wait is made to take a known time."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
import torch

from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.report import Reporter, Window

pytestmark = [pytest.mark.torch]
DRAIN = 0.3  # seconds the "device" still needs when the host reaches the read


def test_the_rate_includes_the_work_still_queued_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def draining(convert: Any) -> Any:
        def wait_then(self: torch.Tensor, *args: Any) -> Any:
            time.sleep(DRAIN)  # what a CUDA tensor's conversion to the host waits for
            return convert(self, *args)
        return wait_then

    env = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"),
                  backend="gloo")
    window = Window(env.device)
    for _ in range(5):
        window.add(torch.tensor(1.0), 100)
        window.commit()  # the step's update was applied (not skipped as non-finite)
    monkeypatch.setattr(torch.Tensor, "tolist", draining(torch.Tensor.tolist))
    monkeypatch.setattr(torch.Tensor, "__float__", draining(torch.Tensor.__float__))
    monkeypatch.setattr(torch.Tensor, "item", draining(torch.Tensor.item))
    loss, rate = window.read(env)
    assert loss == pytest.approx(1.0)
    assert rate <= 500 / DRAIN  # 500 samples took at least the drain; before the fix: ~500 / 0.0001 s


class _OpenRuns:
    """A tracker whose MLflow run is open: new_links as kubetrain.runtime.tracking.Tracker answers it."""

    def record(self, kind: str, fields: dict[str, Any]) -> None:
        pass

    def new_links(self, again: bool = False) -> dict[str, str]:
        return {"mlflow": "http://mlflow/#/runs/1"} if again else {}


def test_a_checkpoint_and_the_end_together_announce_the_runs_once() -> None:
    """The last checkpoint and the end come within a millisecond: one `tracking` line, not two identical ones
    (which `logs -f` users, and its no-repeated-line check, would read as a line shown twice)."""
    env = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"),
                  backend="gloo")
    out = io.StringIO()
    reporter = Reporter(env, out, tracker=_OpenRuns())  # type: ignore[arg-type]
    reporter.emit("checkpoint", step=10, epoch=0, path="/ckpt/step-10.pt")
    reporter.emit("end", step=10)
    lines = out.getvalue().splitlines()
    assert [json.loads(line.split(" ", 1)[1])["kind"] for line in lines] == ["tracking", "checkpoint", "end"]


class _LateRun:
    """A tracker whose thread opens the run only while it is closed (a resumed run that ends within seconds)."""

    def __init__(self) -> None:
        self.link: str | None = None
        self.announced: set[str] = set()

    def record(self, kind: str, fields: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        self.link = "http://mlflow/#/runs/2"

    def new_links(self, again: bool = False) -> dict[str, str]:  # as kubetrain.runtime.tracking.Tracker answers it
        links = {"mlflow": self.link} if self.link and (again or "mlflow" not in self.announced) else {}
        self.announced.update(links)
        return links


def test_a_run_that_opens_after_the_last_record_is_announced_at_close() -> None:
    """`status` finds the run's page in rank 0's log: a run opened after the end record is still announced."""
    env = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"),
                  backend="gloo")
    out = io.StringIO()
    reporter = Reporter(env, out, tracker=_LateRun())  # type: ignore[arg-type]
    reporter.emit("end", step=10)
    reporter.close_tracker()
    reporter.close_tracker()  # once
    records = [json.loads(line.split(" ", 1)[1]) for line in out.getvalue().splitlines()]
    assert [r["kind"] for r in records] == ["end", "tracking"]
    assert records[-1]["runs"] == {"mlflow": "http://mlflow/#/runs/2"}
