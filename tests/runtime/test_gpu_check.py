"""`make gpu-check` on a machine without a GPU: one line on stderr, exit 1, nothing written. (On a GPU machine
the check itself runs; it is not part of this suite. CUDA_VISIBLE_DEVICES="" hides any GPU here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.torch]


def test_without_a_gpu_it_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("gpu-check: no NVIDIA GPU visible to torch ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_make_gpu_check_runs_that_script() -> None:
    # Under `make test` the parent make's MAKEFLAGS/MAKELEVEL would make this one print "Entering directory".
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(["make", "--no-print-directory", "-n", "gpu-check", "GPU_PYTHON=python3"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "python3 benchmarks/gpu_check.py"
