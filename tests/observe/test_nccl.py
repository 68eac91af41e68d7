"""NCCL's transport from recorded log lines (tests/observe/fixtures/nccl/, each file names the public log it
comes from), the fabric a rendered job requests, and the socket-fallback warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.observe.nccl import SocketWatch, requested_fabric, socket_fallback, transports
from kubetrain.render import render_job
from tests.render.test_rules import env, job

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def lines(name: str) -> list[str]:
    return [line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize(("name", "expected"), [
    ("socket.log", {"Socket"}),
    ("socket-2.7.log", {"Socket"}),
    ("ib.log", {"IBext_v8"}),
    ("efa-ring.log", {"AWS Libfabric"}),
])
def test_the_network_is_read_from_each_nccl_generation(name: str, expected: set[str]) -> None:
    assert transports(lines(name)) == expected


def test_init_announcement_and_unrelated_lines() -> None:
    # init.cc: INFO(NCCL_INIT|NCCL_NET, "Using network %s", ...)
    assert transports(["node-0:12:34 [0] NCCL INFO Using network AWS Libfabric"]) == {"AWS Libfabric"}
    unrelated = ["step 10 loss 2.3 via NET/Socket/0", "NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct"]
    assert transports(unrelated) == set()


FABRICS = [
    ({"fabric": "efa", "devices": 32}, ["vpc.amazonaws.com/efa"]),
    ({"fabric": "infiniband", "devices": 8}, ["rdma/ib"]),
    ({"fabric": "infiniband", "resource": "nvidia.com/hostdev"}, ["nvidia.com/hostdev"]),
]


@pytest.mark.parametrize(("network", "expected"), FABRICS)
@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_the_fabric_a_rendered_job_requests(network: dict[str, object], expected: list[str], target: str) -> None:
    obj = render_job(job(target=target, nodes=2, gpusPerNode=8, network=network))[-1]
    assert requested_fabric(obj) == expected
    assert requested_fabric(render_job(job(target=target, nodes=2, gpusPerNode=8))[-1]) == []


def test_gpudirect_pods_count_as_a_fabric() -> None:
    obj = render_job(job(nodes=2, gpusPerNode=8, placement={"cloud": "gke", "gpuType": "nvidia-h100-80gb"},
                         network={"fabric": "gpudirect-tcpx", "networks": ["a", "b", "c", "d"],
                                  "daemonImage": "example.com/tcpx:1"}))[-1]
    assert requested_fabric(obj) == ["GKE GPUDirect"]


def test_fabric_jobs_log_the_lines_that_name_the_transport() -> None:
    obj = render_job(job(nodes=2, gpusPerNode=8, network={"fabric": "efa", "devices": 4}))[-1]
    assert (env(obj)["NCCL_DEBUG"], env(obj)["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    debug = render_job(job(nodes=2, gpusPerNode=8, debug=True, network={"fabric": "efa"}))[-1]
    assert env(debug)["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG_SUBSYS" not in env(debug)  # the preset logs all
    plain = render_job(job(nodes=2, gpusPerNode=8))[-1]
    assert env(plain)["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_SUBSYS" not in env(plain)


def test_the_warning_only_for_a_fabric_job_on_sockets() -> None:
    warning = socket_fallback(["vpc.amazonaws.com/efa"], transports(lines("socket.log")))
    assert warning is not None and warning.startswith(
        "NCCL runs over TCP sockets (NET/Socket) although the pods request vpc.amazonaws.com/efa: inter-node "
        "traffic bypasses the fabric")
    assert socket_fallback([], transports(lines("socket.log"))) is None  # no fabric asked for: sockets are all
    assert socket_fallback(["rdma/ib"], transports(lines("ib.log"))) is None
    assert socket_fallback(["vpc.amazonaws.com/efa"], transports(lines("efa-ring.log"))) is None
    mixed = socket_fallback(["rdma/ib"], transports(lines("ib.log") + lines("socket.log")))
    assert mixed is not None and "(also seen: IBext_v8)" in mixed


def test_the_watch_says_it_once_and_only_for_fabric_jobs() -> None:
    efa = render_job(job(nodes=2, gpusPerNode=8, network={"fabric": "efa"}))[-1]
    said: list[str] = []
    watch = SocketWatch(efa, said.append)
    for line in lines("socket.log"):
        watch(line)
    assert len(said) == 1 and said[0].startswith("warning: NCCL runs over TCP sockets (NET/Socket) although")
    plain: list[str] = []
    quiet = SocketWatch(render_job(job(nodes=2, gpusPerNode=8))[-1], plain.append)
    for line in lines("socket.log"):
        quiet(line)
    assert plain == []
