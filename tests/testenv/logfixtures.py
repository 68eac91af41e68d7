"""Helpers for the logs tests: serve chosen log lines (with chosen timestamps) for a kwok pod."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import kubernetes

from tests.testenv import kwok

BASE = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def stamp(ms: int) -> str:
    """An RFC3339Nano timestamp `ms` milliseconds after BASE, the way the kubelet writes them."""
    return (BASE + dt.timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def now_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def cri(lines: list[tuple[str, str]]) -> str:
    """(timestamp, text) pairs in the CRI log format kwok serves."""
    return "".join(f"{ts} stdout F {text}\n" for ts, text in lines)


def serve_logs(client: kubernetes.client.ApiClient, namespace: str, pod: str, current: Path,
               previous: Path | None = None) -> None:
    """Create or replace the kwok Logs object of `pod`: `current` now, `previous` for previous=true."""
    body: dict[str, Any] = kwok.logs_object(namespace, pod, current, None)
    body["spec"]["logs"][0]["previousLogsFile"] = str(previous or current)
    api = kubernetes.client.CustomObjectsApi(client)
    args = ("kwok.x-k8s.io", "v1alpha1", namespace, "logs")
    try:
        existing = api.get_namespaced_custom_object(*args, pod)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise
        api.create_namespaced_custom_object(*args, body)
        return
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    api.replace_namespaced_custom_object(*args, pod, body)


def restart_container(client: kubernetes.client.ApiClient, namespace: str, pod: str, restarts: int,
                      container: str = "pytorch", exit_code: int = 1) -> None:
    """What the kubelet reports after a container crashed and was restarted `restarts` times."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"name": container, "restartCount": restarts, "ready": True, "started": True,
              "image": "ghcr.io/example/train:1.0", "imageID": "", "containerID": f"kwok://{pod}-{restarts}",
              "state": {"running": {"startedAt": now}},
              "lastState": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": now,
                                           "finishedAt": now}}}
    kubernetes.client.CoreV1Api(client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"containerStatuses": [status]}})


def finish_pod(client: kubernetes.client.ApiClient, namespace: str, pod: str, restarts: int,
               container: str = "pytorch", exit_code: int = 0) -> None:
    """Mark the pod Succeeded/Failed keeping its restart count (kwok's own stage would reset it to 0)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    reason = "Completed" if exit_code == 0 else "Error"
    status = {"name": container, "restartCount": restarts, "ready": False, "started": False,
              "image": "ghcr.io/example/train:1.0", "imageID": "",
              "state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": now,
                                       "finishedAt": now}}}
    phase = "Succeeded" if exit_code == 0 else "Failed"
    kubernetes.client.CoreV1Api(client).patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": phase, "containerStatuses": [status]}})
