"""The NodeLost condition of a running TrainingJob: a replica's node is NotReady, Unknown (its kubelet stopped
posting) or tainted unreachable, with the node's name and when its kubelet last posted.

The hang watch's round lists each running job's pods anyway; it hands them here. Only the nodes of Running pods
that are not Ready are read (the node controller marks a down node's pods not Ready; kubetrain.jobs.nodes), so a
healthy job costs nothing more. The condition is True while a node is down and gone once every node is back,
with a Warning NodeLost Event when it appears and a Normal NodeReady Event when it clears.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubetrain.controller.informer import Key
from kubetrain.controller.mirror import condition
from kubetrain.jobs.nodes import NodeHealth, down_nodes
from kubetrain.jobs.pods import Replica
from kubetrain.kube import watch
from kubetrain.kube.rest import Rest

TYPE = "NodeLost"


def lost_conditions(replicas: list[Replica], down: dict[str, NodeHealth]) -> list[dict[str, Any]]:
    """[NodeLost True] naming each down node, its state, its kubelet's last post and the replicas on it; []
    when no replica's node is down. The message holds the time of the last post, not its age, so that it
    stays the same (no status write) for as long as the node stays down."""
    on: dict[str, list[str]] = {}
    for replica in replicas:
        if replica.node in down:
            on.setdefault(replica.node, []).append(replica.label)
    if not on:
        return []
    parts = [_describe(down[node], labels) for node, labels in sorted(on.items())]
    unreachable = any(down[node].unreachable or down[node].ready == "Unknown" for node in on)
    return [condition(TYPE, True, "NodeUnreachable" if unreachable else "NodeNotReady", "; ".join(parts))]


def _describe(health: NodeHealth, labels: list[str]) -> str:
    posted = (f": its kubelet last posted at {health.heartbeat.astimezone(dt.UTC):%Y-%m-%dT%H:%M:%SZ}"
              if health.heartbeat else "")
    return f"node {health.name} is {health.state()}{posted} (replicas {', '.join(labels)})"


def carried(old: dict[str, Any], latest: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """NodeLost for the reconcile: the latest check's, else the one on the object (a restarted controller keeps
    it until its first check)."""
    if latest is not None:
        return latest
    return [condition(TYPE, True, str(c.get("reason") or ""), str(c.get("message") or ""))
            for c in old.get("conditions") or [] if c.get("type") == TYPE and c.get("status") == "True"]


@dataclass
class NodeWatch:
    """`conditions[key]` is what the reconcile writes (see Controller.reconcile)."""

    rest: Rest
    record: Callable[[dict[str, Any], str, str, str], None]  # an Event
    enqueue: Callable[[Key], None]
    conditions: dict[Key, list[dict[str, Any]]] = field(default_factory=dict)

    def check(self, obj: dict[str, Any], replicas: list[Replica]) -> None:
        key = watch.key(obj)
        latest = lost_conditions(replicas, down_nodes(self.rest, replicas))
        before = self.conditions.get(key)
        if before is None:
            before = carried(obj.get("status") or {}, None)
        if _plain(latest) == _plain(before):
            self.conditions[key] = before  # a kubelet still posting NotReady moves only its time: no new write
            return
        self.conditions[key] = latest
        if latest:
            self.record(obj, "Warning", TYPE, latest[0]["message"])
        else:
            self.record(obj, "Normal", "NodeReady", "the nodes of its replicas are Ready again")
        self.enqueue(key)

    def forget(self, key: Key) -> None:
        self.conditions.pop(key, None)


def _plain(conds: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What a change is judged on: the reason, and the nodes, states and replicas without the time of the post."""
    return [(c["reason"], _POSTED.sub("", c["message"])) for c in conds]


_POSTED = re.compile(r": its kubelet last posted at \S+")
