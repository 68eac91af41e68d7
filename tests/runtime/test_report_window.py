"""The throughput a metrics line reports covers the device's work, not just the host's launches.

On a GPU the training loop only queues kernels: the host reaches the end of a window while the device still
has steps to run, and the window's read is the first point that waits for them. A rate computed before that
wait counts only the launches (on an H100 it reported a GPT-2-small run 15-28 % faster than it ran). Here a
CPU stands in: the tensor-to-host conversion that a device would make wait is made to take a known time."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.report import Window

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
