"""`kubetrain status` and `kubetrain logs` against the real API server warn when a job whose pods ask for a
fabric talks over NCCL's socket transport: kwok serves recorded NCCL lines as rank 0's log. The fabric here
is GKE GPUDirect (a pod annotation, which kwok nodes can schedule); EFA/InfiniBand resources are detected the
same way (tests/observe/test_nccl.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain.jobs.logs import LogOptions, print_logs
from kubetrain.jobs.status import job_status
from kubetrain.kube.connection import Connection
from tests.harness.helpers import pytorchjob, server_side_apply, wait_for
from tests.jobs.test_logs import _follow_in_thread, _running, _serve, _served, conn  # noqa: F401 (a fixture)
from tests.testenv.logfixtures import stamp

pytestmark = pytest.mark.controlplane
FIXTURES = Path(__file__).parents[1] / "observe" / "fixtures" / "nccl"
FABRIC = {"devices.gke.io/container.tcpx-daemon": "- path: /dev/nvidia0\n"}
WARNING = "NCCL runs over TCP sockets (NET/Socket) although the pods request GKE GPUDirect"


def _log(name: str) -> list[tuple[str, str]]:
    recorded = [line for line in (FIXTURES / name).read_text().splitlines() if not line.startswith("#")]
    return [(stamp(i), line) for i, line in enumerate(["KUBETRAIN start", *recorded])]


def _start(k8s: Any, tmp_path: Path, namespace: str, name: str, log: str, annotations: dict[str, str] | None
           ) -> None:
    server_side_apply(k8s, pytorchjob(name, namespace, workers=0, gpus=8, annotations=annotations))
    _running(k8s, namespace, f"{name}-master-0")
    _serve(k8s, tmp_path, namespace, f"{name}-master-0", _log(log))


@pytest.mark.parametrize(("log", "annotations", "warned"), [
    ("socket.log", FABRIC, True),
    ("ib.log", FABRIC, False),  # the fabric's own plugin
    ("socket.log", None, False),  # no fabric asked for: sockets are all there is
])
def test_status_and_logs_warn_about_a_socket_fallback(controlplane: Any, namespace: str, k8s: Any,
                                                      conn: Connection, tmp_path: Path, log: str,  # noqa: F811
                                                      annotations: dict[str, str] | None, warned: bool) -> None:
    _start(k8s, tmp_path, namespace, "nccl", log, annotations)
    _served(conn, namespace, "nccl", "NCCL INFO")
    notices: list[str] = []
    printed: list[str] = []
    print_logs(conn, namespace, "nccl", None, LogOptions(), printed.append, notices.append)
    assert any("via NET/" in line for line in printed)  # the lines themselves still go to stdout
    assert [n[:9 + len(WARNING)] for n in notices if WARNING in n] == ([f"warning: {WARNING}"] if warned else [])
    hints = job_status(conn.rest, None, namespace, "nccl").hints
    assert any(h.startswith(WARNING) for h in hints) is warned


def test_follow_warns_once_while_the_job_runs(controlplane: Any, namespace: str, k8s: Any, conn: Connection,  # noqa: F811
                                              tmp_path: Path) -> None:
    _start(k8s, tmp_path, namespace, "nccl-f", "socket.log", FABRIC)
    sink: list[str] = []
    notices: list[str] = []
    thread, result = _follow_in_thread(conn, namespace, "nccl-f", sink, notices)
    wait_for(lambda: any(WARNING in n for n in notices), f"the socket warning ({notices})", timeout=60, interval=0.1)
    controlplane.set_pod_phase(namespace, "nccl-f-master-0", "Succeeded")
    thread.join(60)
    assert not thread.is_alive() and "error" not in result, result
    assert len([n for n in notices if WARNING in n]) == 1
    assert len([line for line in sink if "via NET/Socket" in line]) == 4  # every line still printed
