"""Waiting for allocatable GPUs (library level, with a fake clock) and the summary."""

from __future__ import annotations

from typing import Any

import pytest
from kindhost import nodes_json

from kubetrain.errors import ClusterError
from kubetrain.kind.cluster import NodeInfo, Summary, format_summary, wait_for_gpus


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_polls_until_the_device_plugin_reports_gpus(fakebin: Any) -> None:
    fakebin.install("kubectl").on("kubectl", "--context", "kind-k", "get", "nodes", responses=[
        {"stdout": nodes_json("k", [0], ready=False)},
        {"stdout": nodes_json("k", [0])},
        {"stdout": nodes_json("k", [2])},
    ])
    clock = FakeClock()
    nodes = wait_for_gpus("kind-k", 2, 60, echo=lambda _: None, sleep=clock.sleep, clock=clock)
    assert nodes == [NodeInfo("k-control-plane", "control-plane", True, 0),
                     NodeInfo("k-worker", "worker", True, 2)]
    assert clock.sleeps == [5.0, 5.0]
    assert len(fakebin.argvs()) == 3


def test_times_out_with_a_pointer_to_the_device_plugin_logs(fakebin: Any) -> None:
    fakebin.install("kubectl").on("kubectl", stdout=nodes_json("k", [1]))
    clock = FakeClock()
    with pytest.raises(ClusterError) as info:
        wait_for_gpus("kind-k", 2, 12, echo=lambda _: None, sleep=clock.sleep, clock=clock)
    assert str(info.value) == ("timed out after 12s waiting for 2 allocatable nvidia.com/gpu (found 1); see "
                               "`kubectl --context kind-k -n nvidia-device-plugin logs "
                               "daemonset/nvidia-device-plugin`")
    assert clock.now == 15.0


def test_unreadable_kubectl_output_counts_as_not_ready(fakebin: Any) -> None:
    fakebin.install("kubectl").on("kubectl", responses=[{"stdout": "not json"}, {"exit": 1},
                                                        {"stdout": nodes_json("k", [])}])
    clock = FakeClock()
    assert len(wait_for_gpus("kind-k", 0, 60, echo=lambda _: None, sleep=clock.sleep, clock=clock)) == 1


def test_summary_lists_nodes_gpus_and_next_steps() -> None:
    text = format_summary(Summary("dev", "kind-dev", [NodeInfo("dev-control-plane", "control-plane", True, 0),
                                                      NodeInfo("dev-worker", "worker", True, 1),
                                                      NodeInfo("dev-worker2", "worker", False, 1)], False))
    assert text.splitlines()[:4] == [
        "kind cluster 'dev' is ready: kubectl context kind-dev, 2 x nvidia.com/gpu allocatable",
        "  NODE               ROLE           READY  GPUS",
        "  dev-control-plane  control-plane  yes    0",
        "  dev-worker         worker         yes    1",
    ]
    assert "  2. kubetrain build --kind dev" in text
    assert "spec.placement.cloud: kind" in text
