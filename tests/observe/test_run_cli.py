"""`kubetrain run` through the renderer: a real 2-process torchrun job, once into pipes and once on a pty."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.runtime.helpers import KUBETRAIN, REPO, ft_train, quiet_env, write_spec
from tests.runtime.torchmod import require_torch

require_torch()
pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(300)]


def test_pipes_get_plain_progress_and_log_dir_keeps_the_json(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "job.yaml", train=ft_train(epochs=2))
    started = time.monotonic()
    result = subprocess.run([*KUBETRAIN, "run", "-f", str(spec), "--log-dir", str(tmp_path / "logs")],
                            env=quiet_env(), cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "KUBETRAIN_METRICS" not in result.stdout + result.stderr
    assert "[node-1 rank-0] kubetrain.runtime: done: step 32/32" in result.stdout  # the program's own line
    progress = [line for line in result.stderr.splitlines() if line.startswith("progress: ")]
    assert progress and progress[-1].startswith("progress: step 32/32 (100%) · epoch 2 · loss ")
    assert "training completed" in progress[-1]
    assert len(progress) <= 2 + elapsed / 10  # first, one per 10 s at most, last
    assert "training summary" in result.stderr and "throughput" in result.stderr
    assert "first step +" in result.stderr and "timeline" in result.stderr
    logged = "".join(p.read_text() for p in (tmp_path / "logs").rglob("stdout.log"))
    assert '"kind":"train"' in logged  # --log-dir keeps the raw metrics lines


def test_terminal_gets_a_live_line_and_a_table(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "job.yaml", train=ft_train(epochs=2))
    main, replica = os.openpty()
    env = quiet_env(TERM="xterm-256color", COLUMNS="120", LINES="40")
    proc = subprocess.Popen([*KUBETRAIN, "run", "-f", str(spec)], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=replica, stderr=replica, start_new_session=True)
    os.close(replica)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: every writer of the pty has gone
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=60) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "KUBETRAIN_METRICS" not in screen
    assert "\x1b[2K" in screen or "\x1b[1A" in screen  # rich redrew the live line in place
    assert "step 32/32 (100%)" in screen and "kubetrain.runtime: done" in screen
    assert "┌" in screen and "training summary" in screen and "throughput" in screen
