"""The job verbs: find, apply, status, logs, gpu, delete of PyTorchJobs and TrainJobs.

The package's face is the verbs on one job object (kubetrain.jobs.crud), so callers write `jobs.get(...)`,
`jobs.find_job(...)`. They load on first use: importing a sibling module (kubetrain.jobs.targets, say)
loads nothing more."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubetrain.jobs.crud import (
        TERMINAL,
        JobSummary,
        check_namespace,
        conditions,
        delete,
        find,
        find_job,
        get,
        gpus_of,
        list_jobs,
        list_objects,
        not_installed,
        path_of_job,
        pod_specs,
        shape,
        state,
        summary,
        wait_finished,
        wait_gone,
    )

__all__ = ["TERMINAL", "JobSummary", "check_namespace", "conditions", "delete", "find", "find_job", "get", "gpus_of",
           "list_jobs", "list_objects", "not_installed", "path_of_job", "pod_specs", "shape", "state", "summary",
           "wait_finished", "wait_gone"]


# mypy reads the names from the TYPE_CHECKING imports above, so a missing one is an error; a module
# __getattr__ it could see would type every unknown name as Any.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in __all__:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(importlib.import_module("kubetrain.jobs.crud"), name)
