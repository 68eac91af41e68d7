"""Pure parts of node awareness and of the re-created pod's reason: what the commands say about a node that
does not answer, and why a replica's pod was created again."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubetrain.jobs.nodes import health_of
from kubetrain.jobs.recreation import recreation_reason

NOW = dt.datetime(2026, 5, 1, 12, 0, 52, tzinfo=dt.UTC)


def _node(ready: str, heartbeat: str, *taints: str) -> dict[str, Any]:
    return {"spec": {"taints": [{"key": t, "effect": "NoExecute"} for t in taints]},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]}}


def test_a_node_whose_kubelet_went_silent_is_named_with_how_long_ago_it_posted() -> None:
    lease = {"spec": {"renewTime": "2026-05-01T12:00:00.000000Z"}}  # newer than the status heartbeat
    health = health_of(_node("Unknown", "2026-05-01T11:59:10Z", "node.kubernetes.io/unreachable"), lease, "gpu-7")
    assert health.down
    assert health.describe(NOW) == ("node gpu-7 is NotReady (status Unknown), tainted unreachable: its kubelet "
                                    "last posted 52 s ago")
    fine = health_of(_node("True", "2026-05-01T12:00:50Z"), None, "gpu-8")
    assert not fine.down and fine.describe(NOW) == "node gpu-8 is Ready: its kubelet last posted 2 s ago"
    unreadable = health_of(None, lease, "gpu-9")  # no RBAC for Nodes: the Lease alone
    assert not unreadable.down and unreadable.posted(NOW) == "its kubelet last posted 52 s ago"


def _pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j-worker-0", "creationTimestamp": "2026-05-01T11:00:00Z"}, "status": status}


def test_a_recreated_pod_gets_the_reason_kubernetes_or_the_hang_policy_recorded() -> None:
    def disrupted(reason: str) -> dict[str, Any]:
        return _pod(conditions=[{"type": "DisruptionTarget", "status": "True", "reason": reason}])

    assert recreation_reason(disrupted("DeletionByTaintManager")) == "node lost"
    assert recreation_reason(disrupted("EvictionByEvictionAPI")) == "evicted"
    assert recreation_reason(_pod(reason="Evicted", phase="Failed")) == "evicted"
    restarted = {"status": {"hang": {"restarts": 1, "lastRestartTime": "2026-05-01T11:30:00Z"}}}
    assert recreation_reason(_pod(phase="Running"), restarted) == "restarted by the hang policy"
    earlier = {"status": {"hang": {"restarts": 1, "lastRestartTime": "2026-05-01T10:30:00Z"}}}  # an older pod's
    assert recreation_reason(_pod(phase="Running"), earlier) == ""
    failed = _pod(containerStatuses=[{"state": {"terminated": {"exitCode": 137}}}])
    assert recreation_reason(failed) == "its container failed (exit 137)"
