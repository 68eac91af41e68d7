"""Where a job's time went, from the cluster: the job, its pods' conditions, its Events and the metrics at
the head of rank 0's log, handed to the pure timeline (kubetrain.observe.timeline)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from kubetrain.jobs import pods
from kubetrain.jobs.logmerge import LineAssembler
from kubetrain.jobs.targets import Target
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


def rank0_head(api: Rest, target: Target, namespace: str, name: str, pod_list: list[dict[str, Any]]) -> list[str]:
    """The first lines (at most HEAD_BYTES) of the first started replica's log; [] if it cannot be read."""
    started = [r for r in pods.replicas_of(pod_list, target, name) if r.started]
    if not started:
        return []
    lines: list[str] = []
    with contextlib.suppress(Exception):  # a pod gone since the list: the timeline shows the rest
        response = pods.open_log(api, namespace, started[0].pod, started[0].container)
        assembler, read = LineAssembler(), 0
        try:
            while read < HEAD_BYTES and (chunk := response.read1(65536)):
                read += len(chunk)
                lines += assembler.feed(chunk)
        finally:
            response.release_conn()
    return lines
