"""`has_no_children`: how `kubetrain run` tells, after a node failed, that another node's agent has no worker
left (it then only waits in torchrun's exit barrier, which a SIGTERM does not interrupt) and stops it at once."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from kubetrain.local.supervisor import has_no_children


def test_a_process_with_a_child_has_children_and_one_without_has_none() -> None:
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    lone = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while has_no_children(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # until sh has forked its sleep
        assert not has_no_children(parent.pid)
        assert has_no_children(lone.pid)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # sh and its sleep
        lone.kill()
        for proc in (parent, lone):
            proc.wait()


def test_an_unknown_process_is_not_taken_for_an_idle_one() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert not has_no_children(gone.pid)
