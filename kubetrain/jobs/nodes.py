"""Is a pod's node there? Its Node's Ready condition and unreachable taint, and when its kubelet last posted
(its Lease in kube-node-lease, renewed every ~10 s; else the Ready condition's heartbeat).

Log reads and execs go through the node's kubelet: a stopped or partitioned kubelet accepts the connection
and never answers. Commands ask here (a) before reading a pod that is not Ready, to say at once that its
node is down rather than wait, and (b) after a read timed out, to say which node did not answer. A healthy
pod costs nothing here. A user who may not read Nodes or Leases (RBAC) gets what could be read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubetrain.errors import ClusterError
from kubetrain.kube.errors import ApiError
from kubetrain.kube.objects import parse_time, status_of
from kubetrain.kube.parallel import map_parallel
from kubetrain.kube.rest import path_of

if TYPE_CHECKING:
    from kubetrain.jobs.pods import Replica
    from kubetrain.kube.rest import Rest

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
LEASE_NAMESPACE = "kube-node-lease"


@dataclass(frozen=True)
class NodeHealth:
    name: str
    ready: str  # the Ready condition's status: True, False, Unknown; "" when the Node could not be read
    unreachable: bool  # tainted node.kubernetes.io/unreachable (the node controller's doing)
    heartbeat: dt.datetime | None  # when its kubelet last posted

    @property
    def down(self) -> bool:
        return self.ready in ("False", "Unknown") or self.unreachable

    def state(self) -> str:
        """NotReady, Unknown (the node controller has not heard from the kubelet), unreachable, Ready."""
        words = {"False": "NotReady", "Unknown": "NotReady (status Unknown)", "True": "Ready"}
        state = words.get(self.ready, "")
        if self.unreachable:
            state = f"{state}, tainted unreachable" if state else "tainted unreachable"
        return state or "of unknown state"

    def posted(self, now: dt.datetime | None = None) -> str:
        """"its kubelet last posted 52 s ago", or "" when that is not known."""
        if self.heartbeat is None:
            return ""
        seconds = max(0, int(((now or dt.datetime.now(dt.UTC)) - self.heartbeat).total_seconds()))
        return f"its kubelet last posted {seconds} s ago"

    def describe(self, now: dt.datetime | None = None) -> str:
        """"node gpu-7 is NotReady: its kubelet last posted 52 s ago"."""
        posted = self.posted(now)
        return f"node {self.name} is {self.state()}" + (f": {posted}" if posted else "")


def health_of(node: dict[str, Any] | None, lease: dict[str, Any] | None, name: str) -> NodeHealth:
    """From the Node and its Lease as the API returns them (either may be None: not readable)."""
    conditions = status_of(node or {}).get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    beats = [parse_time(((lease or {}).get("spec") or {}).get("renewTime")), parse_time(ready.get("lastHeartbeatTime"))]
    known = [b for b in beats if b is not None]
    return NodeHealth(name, str(ready.get("status") or ""), any(t.get("key") == UNREACHABLE_TAINT for t in taints),
                      max(known) if known else None)


def node_health(rest: Rest, names: list[str]) -> dict[str, NodeHealth]:
    """Every named node's health, read in parallel (two GETs each); a node that cannot be read is left out."""
    wanted = sorted(set(filter(None, names)))
    if not wanted:
        return {}
    found = map_parallel(lambda name: _read(rest, name), wanted, 8)
    return {h.name: h for h in found if h is not None}


def _read(rest: Rest, name: str) -> NodeHealth | None:
    node = _get(rest, path_of("", "v1", "nodes", name=name))
    lease = _get(rest, path_of("coordination.k8s.io", "v1", "leases", LEASE_NAMESPACE, name))
    return health_of(node, lease, name) if node or lease else None


def _get(rest: Rest, path: str) -> dict[str, Any] | None:
    with contextlib.suppress(ApiError, ClusterError):  # Forbidden, NotFound, an API server too slow
        return rest.get(path)
    return None


def pod_ready(replica: Replica) -> bool:
    conditions = status_of(replica.obj).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def down_nodes(rest: Rest, replicas: list[Replica]) -> dict[str, NodeHealth]:
    """The nodes that are down among those of the running replicas whose pod is not Ready (the node
    controller marks a down node's pods not Ready; a Ready pod's node is not asked about)."""
    suspects = [r.node for r in replicas if r.node and r.phase == "Running" and not pod_ready(r)]
    return {name: h for name, h in node_health(rest, [n for n in suspects if n]).items() if h.down}


def silent_kubelet(rest: Rest, replica: Replica, seconds: float, what: str) -> str:
    """The line for a read that timed out: which node's kubelet did not answer, and its state."""
    health = node_health(rest, [replica.node or ""]).get(replica.node or "")
    where = f"the kubelet of node {replica.node}" if replica.node else "its kubelet"
    detail = ""
    if health is not None:
        posted = health.posted()
        detail = f" (node {health.state()}" + (f"; {posted}" if posted else "") + ")"
    return f"no {what} within {seconds:g} s: {where} did not answer{detail}"
