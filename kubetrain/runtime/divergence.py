"""Non-finite training (spec.divergence): the per-step agreement, the policy, and the checks that keep
checkpoints finite.

* Every rank contributes each optimizer step's [nan, +inf, -inf] flags (of its loss, summed over its
  micro-batches) to one 3-element all_reduce(MAX), so all ranks agree on every step.
* Under policy skip the flags are read before the update: a NaN on one rank skips the step on all of them.
  The cost is that collective and one device sync per optimizer step (fp16's GradScaler already syncs once
  per step).
* Under policy stop (the default) the flags of the first non-finite step stay on the device and are read
  where the loop waits for the device anyway: before a metrics line, a checkpoint, an evaluation and the
  end. The run then stops as diverged, reporting that step; nothing from it on is logged or saved. The
  steps in between run on a diverged model and are discarded; in exchange the host never waits for the GPU
  at a step (on an H200, dropping that wait took the Trainer from 0.95 to 0.99 of a hand loop's throughput
  on GPT-2 small, and from 0.77 to 0.91 on ResNet-50).
* Under policy continue no step is checked; the logged window's loss and the held-out loss say when it
  diverged, and the run still ends as diverged.
* Under every policy a checkpoint is written only when every rank's parameters and optimizer state are
  finite, so a checkpoint of a diverged model never replaces a good one and rotation (`keep`) only ever
  deletes good ones that are older.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from kubetrain.metrics import EXIT_DIVERGED, diverged_text
from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.settings import Divergence

NONFINITE_VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class TrainingDiverged(Exception):
    """The loss (or held-out loss) became non-finite; `checkpoint` is the last good one (None if none)."""

    exit_code = EXIT_DIVERGED

    def __init__(self, step: int, field: str, value: str, checkpoint: str | None) -> None:
        self.step, self.field, self.value, self.checkpoint = step, field, value, checkpoint
        super().__init__(diverged_text(step, field, value)
                         + (f"; last good checkpoint {checkpoint}" if checkpoint else "; no checkpoint written"))


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank (fsdp), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def floating_tensors(values: Any) -> Iterator[torch.Tensor]:
    """Every floating-point tensor in a (nested) state: dicts, lists, tuples."""
    if isinstance(values, torch.Tensor):
        if values.is_floating_point() or values.is_complex():
            yield _local(values)
    elif isinstance(values, dict):
        for value in values.values():
            yield from floating_tensors(value)
    elif isinstance(values, list | tuple):
        for value in values:
            yield from floating_tensors(value)


def any_nonfinite(tensors: Iterator[torch.Tensor]) -> bool:
    """Whether any element of these tensors is NaN or infinite, with one device sync."""
    flags = [~torch.isfinite(t.detach()).all() for t in tensors if t.numel()]
    return bool(torch.stack(flags).any()) if flags else False


def state_is_finite(module: nn.Module, optimizer: torch.optim.Optimizer, env: DistEnv) -> bool:
    """Parameters, buffers and optimizer state finite on every rank (a collective when world_size > 1)."""
    tensors = [*module.parameters(), *module.buffers()]
    bad = any_nonfinite(floating_tensors([tensors, list(optimizer.state.values())]))
    if env.world_size == 1:
        return not bad
    flag = torch.tensor([float(bad)], device=env.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return not bool(flag[0])


def nonfinite_flags(loss: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """[nan, +inf, -inf] of this step's loss on any rank, as a float64 tensor on the device: every rank gets
    the same flags (a collective when world_size > 1, queued on the device like the step's kernels)."""
    value = loss.detach().double()
    flags = torch.stack([torch.isnan(value), torch.isposinf(value), torch.isneginf(value)]).double()
    if env.world_size > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return flags


def kind_of(nan: float, pos: float, neg: float) -> str | None:
    return "nan" if nan else "inf" if pos else "-inf" if neg else None


def nonfinite_kind(loss: torch.Tensor, env: DistEnv) -> str | None:
    """"nan", "inf" or "-inf" when this step's loss is non-finite on any rank (nan wins), else None; the same
    answer on every rank (a collective when world_size > 1), read with one device sync."""
    return kind_of(*nonfinite_flags(loss, env).tolist())


@dataclass
class Guard:
    """spec.divergence for one run: what a non-finite step does, and what was seen."""

    policy: Divergence
    env: DistEnv
    skipped: int = 0  # steps skipped in this process's run
    in_a_row: int = 0
    first: tuple[int, str, str] | None = None  # (step, field, value) of the first non-finite value (continue)
    found: torch.Tensor | None = None  # policy stop: [nan, +inf, -inf, step] of the first non-finite step

    @property
    def checks_steps(self) -> bool:
        return self.policy.policy != "continue"

    def check(self, loss: torch.Tensor, step: int) -> str | None:
        """An optimizer step's loss, before its update. Policy skip decides now: "nan", "inf" or "-inf" to skip
        (a device sync per step), else None. Policy stop keeps the first non-finite step's flags on the device,
        without waiting for the step: `seen` reads them where the loop waits for the device anyway (a metrics
        line, a checkpoint, an evaluation, the end), so the host runs ahead of the GPU as in a loop without
        the check. Policy continue checks nothing."""
        if self.policy.policy == "skip":
            return nonfinite_kind(loss, self.env)
        if self.policy.policy == "stop":
            flags = nonfinite_flags(loss, self.env)
            row = torch.cat([flags, torch.full((1,), float(step), dtype=torch.float64, device=flags.device)])
            self.found = row if self.found is None else torch.where(self.found[:3].any(), self.found, row)
        return None

    def seen(self) -> tuple[int, str, str] | None:
        """(step, "loss", value) of the first non-finite step checked under policy stop, or None (a device
        sync)."""
        if self.found is None:
            return None
        nan, pos, neg, step = self.found.tolist()
        value = kind_of(nan, pos, neg)
        return (int(step), "loss", value) if value else None

    def skips(self, step: int, value: str) -> bool:
        """A non-finite step: True to skip it (policy skip, within maxSkippedSteps in a row), False to stop."""
        if self.policy.policy != "skip" or self.in_a_row >= self.policy.maxSkippedSteps:
            return False
        self.skipped += 1
        self.in_a_row += 1
        self.say(f"skipped step {step}: loss {value} (spec.divergence.policy skip; {self.in_a_row} in a row, "
                 f"at most {self.policy.maxSkippedSteps})")
        return True

    def finite_step(self) -> None:
        self.in_a_row = 0

    def note(self, step: int, field: str, value: str) -> None:
        """Policy continue: remember (and say once) the first non-finite value."""
        if self.first is None:
            self.first = (step, field, value)
            self.say(f"{diverged_text(step, field, value)}; spec.divergence.policy continue: training on, no "
                     "checkpoint is written while the parameters are not finite")

    def say(self, text: str) -> None:
        if self.env.is_main:
            print(f"kubetrain.runtime: {text}", file=sys.stderr, flush=True)
