"""`kubetrain stacks` and `status --hang` through the CLI against the real control plane: the probe goes
through the API server's pods/exec to kwok, which runs it on this machine (no kubetrain runtime there: no
rank records), so the command says there is no rank to ask, exit 1; a missing job is a one-line error."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from kubetrain.podenv import POD_PROGRESS_DIR
from tests.cli.test_logs_gpu_doctor_cli import job, run

__all__ = ["job"]  # the fixture: a running PyTorchJob `cli` on kwok's nodes


@pytest.fixture
def no_host_records() -> None:
    """kwok runs the probe on this machine, whose /tmp stands in for the pods': records an earlier local run
    left there (a rendered pod's env run on the host) would be read as this job's."""
    shutil.rmtree(POD_PROGRESS_DIR, ignore_errors=True)


@pytest.mark.controlplane
@pytest.mark.usefixtures("no_host_records")
def test_stacks_execs_into_every_running_pod_and_says_when_there_is_no_rank(controlplane: Any, namespace: str,
                                                                              job: str) -> None:
    kc = ("--kubeconfig", str(controlplane.kubeconfig), "-n", namespace)
    result = run("stacks", job, *kc)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: no rank of cli to ask: no running pod has a kubetrain runtime progress record (docs/hangs.md)"]

    shown = run("status", job, "--hang", *kc)
    assert shown.exit_code == 0 and f"pytorchjob {namespace}/cli: " in shown.stdout
    assert "Hang:" not in shown.stdout  # no records: nothing to judge

    missing = run("stacks", "nope", *kc)
    assert missing.exit_code == 1 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "nope" in missing.stderr
