"""Which network NCCL really uses, read from the log, against the fabric the pods asked for.

On EFA or InfiniBand nodes NCCL falls back to TCP sockets without an error when its plugin or the verbs
libraries are missing from the image, or the devices are not visible (aws-samples/awsome-distributed-ai#386):
the job trains, at a fraction of the speed. With NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS INIT (kubetrain renders
both for jobs with `spec.network`), NCCL says what it picked, in lines like

    NCCL INFO Using network Socket
    NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
    NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
    NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA

Intra-node channels (`via P2P/...`, `via SHM/...`) say nothing about the fabric and are ignored. Pure functions.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

SOCKET = "Socket"
# Extended resources of RDMA-capable fabrics: the EFA device plugin, the k8s-rdma-shared-dev-plugin (rdma/*,
# its name is the cluster's choice), NVIDIA Network Operator's host-device and SR-IOV resources.
FABRIC_RESOURCES = ("vpc.amazonaws.com/efa", "nvidia.com/hostdev")
FABRIC_PREFIXES = ("rdma/", "mellanox.com/")
GPUDIRECT_ANNOTATION = "devices.gke.io/container.tcpx"  # GKE GPUDirect-TCPX/TCPXO daemons (render/gpudirect.py)
# "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0" (NCCL >= 2.12), "Channel 09 : 7[e3000] -> 10[ca000]
# [receive] via NET/Socket/0" (2.7-2.11), "Ring 00 : 7 -> 8 [receive] via NET/AWS Libfabric/0" (2.4-2.6).
_VIA_NET = re.compile(r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? : .*?\bvia NET/([^/\n]+)")
_USING = re.compile(r"NCCL INFO Using network (\S[^\n]*?)\s*$")


def transports(lines: Iterable[str]) -> set[str]:
    """The NCCL network plugins named in `lines` (Socket, IB, AWS Libfabric, OFI, GPUDirectTCPX...)."""
    found: set[str] = set()
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        if match := _VIA_NET.search(line) or _USING.search(line):
            found.add(match.group(1).strip())
    return found


def requested_fabric(obj: dict[str, Any]) -> list[str]:
    """The fabric resources (or GPUDirect daemon) a PyTorchJob's or TrainJob's pods request, sorted."""
    found: set[str] = set()
    _walk(obj, found)
    return sorted(found)


def _walk(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("limits", "requests") and isinstance(item, dict):
                found.update(name for name in item if _is_fabric(str(name)))
            elif key == "annotations" and isinstance(item, dict):
                found.update("GKE GPUDirect" for name in item if str(name).startswith(GPUDIRECT_ANNOTATION))
            else:
                _walk(item, found)
    elif isinstance(value, list):
        for item in value:
            _walk(item, found)


def _is_fabric(name: str) -> bool:
    return name in FABRIC_RESOURCES or name.startswith(FABRIC_PREFIXES)


def socket_fallback(requested: list[str], seen: set[str]) -> str | None:
    """A one-line warning when pods that asked for a fabric talk over NCCL's socket transport, else None."""
    if not requested or SOCKET not in seen:
        return None
    others = sorted(seen - {SOCKET})
    also = f" (also seen: {', '.join(others)})" if others else ""
    return (f"NCCL runs over TCP sockets (NET/Socket){also} although the pods request {', '.join(requested)}: "
            "inter-node traffic bypasses the fabric and runs at a fraction of its speed; check that the image "
            "has the fabric's NCCL plugin (aws-ofi-nccl for EFA, libibverbs/rdma-core for InfiniBand) and "
            "NCCL_NET / NCCL_IB_HCA / NCCL_SOCKET_IFNAME (the NCCL INFO lines of `kubetrain logs` say more)")


class SocketWatch:
    """Reads log lines as they are printed (from any thread) and says once, through `notice`, when a job
    whose pods request a fabric turns out to run NCCL over sockets: `kubetrain logs`, with and without -f."""

    def __init__(self, job: dict[str, Any], notice: Callable[[str], None]) -> None:
        self.requested = requested_fabric(job)
        self.notice = notice
        self.seen: set[str] = set()
        self.said = False
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        if not self.requested or self.said or "NCCL INFO" not in line:
            return
        with self._lock:
            self.seen |= transports([line])
            if not self.said and (warning := socket_fallback(self.requested, self.seen)):
                self.said = True
                self.notice(f"warning: {warning}")
