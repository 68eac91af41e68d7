"""World size = the GPUs the pods get: a pod's process count against its nvidia.com/gpu limit.

One rule, shared by the spec checks (render) and `kubetrain validate` (PyTorchJob, TrainJob and training
runtimes). torchrun (torch/distributed/run.py) turns `--nproc-per-node` / PET_NPROC_PER_NODE into a count:
`gpu` is torch.cuda.device_count() and raises "Cuda is not available" without one; `cpu` is os.cpu_count();
`auto` is the device count when CUDA is available, else os.cpu_count(). os.cpu_count() is the node's CPU
count, not the pod's CPU limit (kubeflow/trainer#2407), and the device count in a pod is its GPU limit (the
device plugin exposes only those).
"""

from __future__ import annotations

from typing import Literal

Severity = Literal["error", "warning"]
NAMED = ("auto", "cpu", "gpu")
_NODE_CPUS = ("starts one process per CPU of the node (torchrun counts os.cpu_count(), not the pod's CPU "
              "limit); set a number")


def process_count(value: object) -> int | str | None:
    """An int for a numeric count (int or digit string), `auto`/`cpu`/`gpu`, or None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        if value in NAMED:
            return value
    return None


def procs_gpus_problem(procs: object, gpus: int) -> tuple[Severity, str] | None:
    """What is wrong with `procs` training processes (a count or auto/cpu/gpu) on a pod with `gpus` GPUs."""
    count = process_count(procs)
    if count is None:
        return None
    if count == "gpu":
        return ("error", "`gpu` on a pod without nvidia.com/gpu: torchrun fails at start (\"Cuda is not "
                "available\")") if gpus == 0 else None
    if count == "auto":
        return ("warning", f"`auto` on a pod without nvidia.com/gpu {_NODE_CPUS}") if gpus == 0 else None
    if count == "cpu":
        return ("warning", f"`cpu` {_NODE_CPUS}" + (f", and none of them uses the pod's {gpus} GPU(s)"
                                                    if gpus else ""))
    assert isinstance(count, int)
    if gpus and count > gpus:
        return ("error", f"{count} processes per pod on {gpus} GPU(s): local ranks {gpus}..{count - 1} have no "
                "GPU of their own (cuda 'invalid device ordinal', or NCCL 'Duplicate GPU detected'); set it "
                f"to {gpus}")
    if gpus and count < gpus:
        return ("warning", f"{count} process(es) per pod on {gpus} GPUs: {gpus - count} GPU(s) per pod stay "
                f"idle unless each process drives several; set it to {gpus} for one process per GPU")
    return None
