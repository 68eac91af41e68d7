"""The process group: the same code under torchrun, a PyTorchJob, a TrainJob, or plain `python`.

torchrun (which reads the operator's PET_* variables) exports RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT to every worker; without them the process runs as a world of one on an in-memory store, so the
same training code also works from a notebook or a unit test.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist

from kubetrain.runtime.config import RuntimeConfigError


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that prints metrics and writes checkpoints."""
        return self.rank == 0


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        raise RuntimeConfigError(f"environment variable {name}={value!r} is not an integer") from None


def ranks_from_env(environ: Mapping[str, str]) -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size) as torchrun exports them; (0, 1, 0, 1) without."""
    world = _int(environ, "WORLD_SIZE", 1)
    rank = _int(environ, "RANK", 0)
    local_rank = _int(environ, "LOCAL_RANK", 0)
    local_world = _int(environ, "LOCAL_WORLD_SIZE", 1)
    if not 0 <= rank < world:
        raise RuntimeConfigError(f"RANK={rank} is outside WORLD_SIZE={world}")
    return rank, world, local_rank, local_world


def choose_backend(requested: str, cuda: bool) -> str:
    """auto: nccl with CUDA, gloo without. Asking for nccl without a GPU is a configuration error."""
    if requested == "auto":
        return "nccl" if cuda else "gloo"
    if requested == "nccl" and not cuda:
        raise RuntimeConfigError("spec.train.backend: nccl needs CUDA, and this process sees no GPU")
    return requested


def choose_device(local_rank: int, cuda: bool) -> torch.device:
    """cuda:LOCAL_RANK with CUDA (made current before the process group starts), else the CPU."""
    if not cuda:
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    torch.cuda.set_device(device)
    return device


def init_distributed(backend: str = "auto", timeout_seconds: float = 1800,
                     environ: Mapping[str, str] | None = None) -> DistEnv:
    """Start the process group (if not started yet) and pick the device. Pair with `shutdown_distributed`."""
    environ = os.environ if environ is None else environ
    rank, world, local_rank, local_world = ranks_from_env(environ)
    cuda = torch.cuda.is_available()
    chosen = choose_backend(backend, cuda)
    device = choose_device(local_rank, cuda)
    if not dist.is_initialized():
        timeout = timedelta(seconds=timeout_seconds)
        if "MASTER_ADDR" in environ and "RANK" in environ:
            dist.init_process_group(chosen, timeout=timeout, device_id=device if chosen == "nccl" else None)
        else:
            store = dist.HashStore()  # type: ignore[attr-defined]
            dist.init_process_group(chosen, store=store, rank=0, world_size=1, timeout=timeout)
    return DistEnv(rank, world, local_rank, local_world, device, chosen)


def shutdown_distributed() -> None:
    """destroy_process_group if one is running (safe to call twice, and from error paths)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed(backend: str = "auto", timeout_seconds: float = 1800) -> Iterator[DistEnv]:
    """`with distributed() as env:` - the process group lives exactly as long as the block, on every exit."""
    env = init_distributed(backend, timeout_seconds)
    try:
        yield env
    finally:
        shutdown_distributed()


def exit_process(code: int) -> NoReturn:
    """Flush stdio and end the process without interpreter finalization.

    Why: after DDP, torch keeps the gloo process group - and its C++ threads (pt_gloo_runloop,
    gloo_tcp_loop) - alive past destroy_process_group (DDP leaves references to it that gc cannot see).
    Python's finalization then runs while those threads exist; a gloo thread that needs the GIL at that
    moment (e.g. to release a tensor of a just-finished collective) is ended by CPython with pthread_exit,
    whose unwinding through a noexcept C++ frame calls std::terminate: "terminate called without an active
    exception", SIGABRT, exit -6 after a completed run. Training, checkpoints and the process group are all
    finished when a training script calls this, so there is nothing left for finalization to do (it skips
    atexit handlers: close your files first).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
