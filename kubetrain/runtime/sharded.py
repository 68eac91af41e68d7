"""Sharded checkpoints for strategy fsdp: torch.distributed.checkpoint (DCP), resharded on load.

A checkpoint is a directory `step-<N>/`: each rank writes its own shards (`__<rank>_0.distcp`), the
coordinator writes `.metadata` last, and rank 0 adds `meta.pt` (position, scheduler, RNG states of every
rank). Everything is written under `.tmp-step-<N>/` and published by rank 0 with one rename once every
rank has finished, so resume never sees half a checkpoint (kubetrain.runtime.checkpoint rules).

Loading uses the current model's sharding as the template: DCP reads whichever saved shards overlap each
rank's new shards, so a checkpoint written by 2 ranks resumes on 1 (or 1 on 2, or 4 on 3).

On an object store (kubetrain.runtime.objstore) DCP writes in place through FsspecWriter and rank 0
publishes by writing the manifest last; the rest is the same.

asyncCheckpoint: `dcp.async_save` copies the state to host memory and writes in a background thread,
using its own gloo process group (collectives of two threads must not share one group). The checkpoint
is published when it is done: at the next save, at the end of training, or on SIGTERM.

DCP is imported where a sharded checkpoint is saved or loaded: it pulls in DTensor and sympy, about 0.6 s
of CPU that every rank of a DDP or single-process job would otherwise pay at start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from kubetrain.runtime.distributed import DistEnv


@dataclass
class Published:
    """A checkpoint that just became visible: for the `checkpoint` metrics line."""

    step: int
    path: str
    reason: str
    seconds: float
    epoch: int


@dataclass
class _Pending:
    future: Any
    tmp: Any
    final: Any
    step: int
    reason: str
    started: float
    epoch: int


class ShardedCheckpoints:
    """Save/load an FSDP2 model and its optimizer as DCP directories in a CheckpointStore."""

    def __init__(self, store: Any, env: DistEnv, async_save: bool) -> None:
        self.store = store
        self.env = env
        # a separate group: the background writer's collectives must not interleave with training's
        self.async_group: Any = dist.new_group(backend="gloo") if async_save and env.world_size > 1 else None
        self.async_save = async_save
        self.pending: _Pending | None = None

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict[str, Any], step: int,
             reason: str) -> list[Published]:
        """Write a checkpoint (a collective); returns what got published (the previous async one too)."""
        from torch.distributed.checkpoint import state_dict_saver
        from torch.distributed.checkpoint.state_dict import get_state_dict

        done = self.flush()
        tmp, final = self.store.sharded_target(step)
        started = time.perf_counter()
        if self.env.is_main:
            self.store.write_meta(tmp, meta)
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optim_state}
        if self.async_save:
            future = state_dict_saver.async_save(state, storage_writer=self.store.dcp_writer(tmp),
                                                 process_group=self.async_group)
            self.pending = _Pending(future, tmp, final, step, reason, started, meta["epoch"])
            return done
        state_dict_saver.save(state, storage_writer=self.store.dcp_writer(tmp))
        self.pending = _Pending(None, tmp, final, step, reason, started, meta["epoch"])
        return [*done, *self.flush()]

    def flush(self) -> list[Published]:
        """Wait for the pending write on every rank, then rank 0 publishes it (a collective)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return []
        if pending.future is not None:
            pending.future.result()
        if self.env.world_size > 1:
            dist.barrier()  # every rank's shards are on storage
        if self.env.is_main:
            self.store.publish_sharded(pending.tmp, pending.final)
            self.store.prune()
        if self.env.world_size > 1:
            dist.barrier()  # published before anyone reads or exits
        return [Published(pending.step, str(pending.final), pending.reason, time.perf_counter() - pending.started,
                          pending.epoch)]

    def load(self, path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Load into the current sharding (resharding as needed); returns rank 0's meta."""
        from torch.distributed.checkpoint import state_dict_loader
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(model, optimizer)  # templates, also initialises Adam state
        state = {"model": model_state, "optimizer": optim_state}
        state_dict_loader.load(state, storage_reader=self.store.dcp_reader(path))
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
        meta: dict[str, Any] = self.store.read_meta(path)
        return meta
