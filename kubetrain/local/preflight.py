"""Checks before anything starts, so a typo is one line of error instead of N crashed processes.

The Trainer API's 'module:function' refs and a `python -m module` command's module are located (not
imported: that would run user code and torch) with importlib's finder in a short-lived interpreter that
has the job's environment and working directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from kubetrain.checks import FAIL, WARN, Check
from kubetrain.errors import Problem, SpecError, UsageError
from kubetrain.local.plan import RunPlan

DEV = Path("/dev")  # where the NVIDIA device nodes are
_FIND = """
import importlib.util, json, os, sys
sys.path.insert(0, os.getcwd())  # python -m puts the working directory first
errors = {}
for field, ref in json.loads(sys.argv[1]).items():
    module = ref.partition(":")[0]
    try:
        found = importlib.util.find_spec(module) is not None
        reason = f"No module named {module!r}"
    except Exception as exc:  # a parent package failed to import
        found = False
        reason = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
    if not found:
        errors[field] = f"cannot import {module!r}: {reason}"
print(json.dumps(errors))
"""


def require_torch() -> None:
    """torch is the `runtime` extra: say how to get it rather than failing in every process."""
    if importlib.util.find_spec("torch") is None:
        raise UsageError("torch is not installed in this environment; install the runtime extra: "
                         "pip install 'kubetrain[runtime]'")


def check_refs(plan: RunPlan) -> None:
    """Every Trainer ref's module, and the command's module, can be found from the job's working directory
    and PYTHONPATH."""
    refs = {f"spec.train.{name}": ref for name, ref in plan.trainer_refs.items()}
    if plan.kind == "module":
        refs["spec.command"] = plan.target
    if not refs:
        return
    result = subprocess.run([sys.executable, "-c", _FIND, json.dumps(refs)], cwd=plan.cwd,
                            env=plan.nodes[0].env, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise UsageError(f"cannot check {', '.join(refs)}: {result.stderr.strip().splitlines()[-1:]}")
    errors = json.loads(result.stdout)
    if errors:
        raise SpecError([Problem(name, message) for name, message in sorted(errors.items())])


def check_program(plan: RunPlan) -> None:
    """A script command names a file that exists here; another program one that is on PATH here."""
    if plan.kind == "script":
        script = Path(plan.target)
        script = script if script.is_absolute() else plan.cwd / script
        if not script.is_file():
            raise SpecError([Problem("spec.command", f"{script}: no such file")])
    elif plan.kind == "executable" and not plan.target:
        raise SpecError([Problem("spec.command", "names no program for torchrun to run")])
    elif plan.kind == "executable" and not _executable(plan):
        raise SpecError([Problem("spec.command", f"{plan.target}: no such program here (not on PATH)"
                                 if "/" not in plan.target else f"{plan.target}: no such executable file")])


def _executable(plan: RunPlan) -> bool:
    if "/" in plan.target:
        path = Path(plan.target) if plan.target.startswith("/") else plan.cwd / plan.target
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(plan.target, path=plan.nodes[0].env.get("PATH", os.defpath)) is not None


def _gpu_devices(dev: Path) -> list[Path]:
    """The NVIDIA GPU device nodes (/dev/nvidia0, ...; not nvidiactl or nvidia-uvm)."""
    return [d for d in dev.glob("nvidia*") if d.name.removeprefix("nvidia").isdigit()]


def check_port(port: int) -> None:
    """--port must be free on 127.0.0.1, where node 1's agent serves the rendezvous store: agents that find
    another program there wait for a rendezvous that never comes (10 minutes, torchrun's join timeout)."""
    if not port:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store binds: TIME_WAIT is no conflict
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UsageError(f"--port {port}: 127.0.0.1:{port} is in use ({exc.strerror}); choose another port, "
                             "or leave --port out for a free one") from None


def machine_checks(plan: RunPlan, gpus_per_node: int | None, dev: Path | None = None,
                   environ: Mapping[str, str] = os.environ, cores: int | None = None) -> list[Check]:
    """What this machine can give the plan: its GPUs (too few is a failure, none a warning) and its CPU cores."""
    dev = dev or DEV
    found = (gpu_count_check(plan, gpus_per_node, dev, environ), gpu_check(gpus_per_node, dev), cpu_check(plan, cores))
    return [check for check in found if check is not None]


def gpu_count_check(plan: RunPlan, gpus_per_node: int | None, dev: Path, environ: Mapping[str, str]) -> Check | None:
    """Each local node gets its own GPUs (CUDA_VISIBLE_DEVICES): a machine with fewer than nodes × gpusPerNode
    would leave later nodes' ranks on indices that do not exist, so they see no GPU, pick gloo while rank 0
    picks nccl, and the process group never forms. Machines without GPUs are gpu_check's."""
    found = _gpu_devices(dev)
    wanted = len(plan.nodes) * (gpus_per_node or 0)
    if not found or wanted <= len(found) or "CUDA_VISIBLE_DEVICES" in environ:
        return None
    return Check("gpus", FAIL, f"spec.gpusPerNode: {len(plan.nodes)} node(s) x {gpus_per_node} GPU(s) need {wanted} "
                 f"GPUs on this machine, which has {len(found)} ({dev}/nvidia*): run with --nodes "
                 f"{max(1, len(found) // (gpus_per_node or 1))}, or set CUDA_VISIBLE_DEVICES yourself")


def gpu_check(gpus_per_node: int | None, dev: Path) -> Check | None:
    """gpusPerNode asks for GPUs this machine does not have (no NVIDIA device node): the run goes on, on the
    CPU, which is worth a line rather than a surprise."""
    if not gpus_per_node or _gpu_devices(dev):
        return None
    return Check("gpus", WARN, f"spec.gpusPerNode: {gpus_per_node} GPU(s) per node requested, but this machine has "
                 f"no NVIDIA GPU ({dev}/nvidia* absent): the local run uses the CPU; each pod in the cluster gets its "
                 "GPUs")


def cpu_check(plan: RunPlan, cores: int | None = None) -> Check | None:
    """More training processes than CPU cores this process may use: they time-share the cores (and each one's
    intra-op threads), so the run is slower than with fewer processes; worth a line, not a refusal."""
    cores = cores or _usable_cores()
    total = len(plan.nodes) * plan.procs_per_node
    if total <= cores:
        return None
    return Check("cpus", WARN, f"{len(plan.nodes)} node(s) x {plan.procs_per_node} process(es) = {total} training "
                 f"processes on {cores} CPU core(s): they share the cores and run slower than fewer would; lower "
                 "--procs-per-node or --nodes (spec.procsPerNode, spec.nodes)")


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # a container's or taskset's CPU set, not the machine's count
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
