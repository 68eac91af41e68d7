"""The words for Kubernetes objects as kubetrain reads them (plain JSON dicts): accessors, condition scans,
RFC 3339 times and well-known names. Imports nothing from kubetrain, so every layer may use it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
JOB_LABEL = "kubetrain.dev/job"  # on every object kubetrain renders for a job
SWEEP_LABEL = "kubetrain.dev/sweep"  # on every trial's TrainingJob: the sweep's name
TRIAL_LABEL = "kubetrain.dev/trial"  # the trial's number
OBJECTIVE_ANNOTATION = "kubetrain.dev/sweep-objective"  # the metric the controller keeps in the trial's status
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue: the LocalQueue a job is submitted to
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # Kueue: on a Workload, the uid of its job
# A job's final condition types: PyTorchJob (Succeeded/Failed), TrainJob and batch Job (Complete/Failed).
FINAL_CONDITIONS = ("Succeeded", "Complete", "Failed")

Obj = dict[str, Any]
In = Mapping[str, Any]  # what the accessors read: any JSON object


def meta_of(obj: In) -> Obj:
    """metadata, {} when absent."""
    return obj.get("metadata") or {}


def name_of(obj: In) -> str:
    return str(meta_of(obj).get("name") or "")


def namespace_of(obj: In) -> str:
    return str(meta_of(obj).get("namespace") or "")


def labels_of(obj: In) -> dict[str, str]:
    return meta_of(obj).get("labels") or {}


def status_of(obj: In) -> Obj:
    """status, {} when absent."""
    return obj.get("status") or {}


def conditions_of(obj: In) -> list[Obj]:
    return list(status_of(obj).get("conditions") or [])


def true_condition(obj: In, *types: str) -> Obj | None:
    """The first condition of one of `types` whose status is "True"."""
    return next((c for c in conditions_of(obj) if c.get("type") in types and c.get("status") == "True"), None)


def final_condition(obj: In) -> Obj | None:
    """The job's true Succeeded / Complete / Failed condition, if it has finished."""
    return true_condition(obj, *FINAL_CONDITIONS)


def parse_time(value: object) -> dt.datetime | None:
    """An RFC 3339 timestamp as the API writes it ("2024-05-01T12:00:00Z", fractions and offsets allowed);
    None when empty or unreadable."""
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


_EPOCH_CACHE: dict[str, int] = {}


def time_ns(stamp: str) -> int | None:
    """An RFC 3339 timestamp with any fraction length and a zone (Z or an offset), as the kubelet prefixes log
    lines (RFC3339Nano drops trailing zeros, so the strings do not sort), to integer nanoseconds since the
    epoch; None if it is not one. datetime keeps microseconds only, so the fraction is read apart; the
    whole seconds are cached (a followed log parses one timestamp per line)."""
    if len(stamp) < 20 or stamp[4] != "-" or stamp[10] != "T":
        return None
    seconds_part, rest = stamp[:19], stamp[19:]
    nanos = 0
    if rest.startswith("."):
        digits = len(rest) - len(rest[1:].lstrip("0123456789"))
        fraction, rest = rest[1:digits], rest[digits:]
        if fraction:
            nanos = int(fraction[:9].ljust(9, "0"))
    epoch = _epoch_seconds(seconds_part, rest)
    return None if epoch is None else epoch * 1_000_000_000 + nanos


def _epoch_seconds(seconds_part: str, zone: str) -> int | None:
    cache_key = seconds_part + zone
    cached = _EPOCH_CACHE.get(cache_key)
    if cached is not None:
        return cached
    if not zone:  # a log line's time without a zone is not the kubelet's: no guessing
        return None
    parsed = parse_time(seconds_part + zone)
    if parsed is None:
        return None
    value = int(parsed.timestamp())
    if len(_EPOCH_CACHE) > 4096:  # one entry per distinct second: keep it bounded on long follows
        _EPOCH_CACHE.clear()
    _EPOCH_CACHE[cache_key] = value
    return value
