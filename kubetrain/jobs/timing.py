"""Where a job's time went, from the cluster: the job, its pods' conditions, its Events and the metrics at
the head of rank 0's log, handed to the pure timeline (kubetrain.observe.timeline)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubetrain.jobs import nodes, pods
from kubetrain.jobs.logmerge import LineAssembler
from kubetrain.jobs.targets import Target
from kubetrain.kube.errors import TimedOut
from kubetrain.observe.progress import ProgressTracker
from kubetrain.observe.timeline import cluster_moments, format_timeline

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

HEAD_BYTES = 256 * 1024  # the start and first train records come within the first lines of rank 0's log


def timeline_of(obj: dict[str, Any], pod_list: list[dict[str, Any]], events: list[dict[str, Any]],
                head: list[str]) -> str:
    """The timeline from what `status` read: the job, its pods, their Events and rank 0's log head."""
    tracker = ProgressTracker()
    for line in head:
        tracker.feed(line)
        if "train" in tracker.times:
            break
    return format_timeline(cluster_moments(obj, pod_list, events, tracker))


def rank0_head(rest: Rest, target: Target, namespace: str, name: str, pod_list: list[dict[str, Any]]
               ) -> tuple[list[str], str]:
    """The first lines (at most HEAD_BYTES) of the first started replica's log ([] if it cannot be read), and
    "" or the line saying why not when that is its node: down, or its kubelet did not answer in time."""
    started = [r for r in pods.replicas_of(pod_list, target, name) if r.started]
    if not started:
        return [], ""
    first = started[0]
    if (health := nodes.down_nodes(rest, [first]).get(first.node or "")) is not None:
        return [], f"{first.label}'s log not read: {health.describe()}"
    lines: list[str] = []
    try:
        response = pods.open_log(rest, namespace, first.pod, first.container)
        assembler, read = LineAssembler(), 0
        try:
            while read < HEAD_BYTES and (chunk := response.read1(65536)):
                read += len(chunk)
                lines += assembler.feed(chunk)
        finally:
            response.release_conn()
    except (TimedOut, TimeoutError):
        return lines, f"{first.label}'s log: {nodes.silent_kubelet(rest, first, rest.kubelet_timeout, 'answer')}"
    except Exception:  # a pod gone since the list: the timeline shows the rest
        pass
    return lines, ""
