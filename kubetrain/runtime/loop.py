"""The loop behind Trainer: micro-steps, optimizer steps, metrics, evaluation, checkpoints, resume."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from kubetrain.metrics import nonfinite_text
from kubetrain.runtime.checkpoint import StoreBase
from kubetrain.runtime.config import RuntimeConfigError
from kubetrain.runtime.data import ResumableSampler, batch_size_of, to_device
from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.divergence import NONFINITE_VALUES, Guard, TrainingDiverged, state_is_finite
from kubetrain.runtime.heartbeat import Heartbeat
from kubetrain.runtime.profile import StepProfiler
from kubetrain.runtime.report import Reporter, Window, gpu_memory_mb
from kubetrain.runtime.settings import Divergence, Train
from kubetrain.runtime.sharded import ShardedCheckpoints
from kubetrain.runtime.state import (
    broadcast_from_main,
    gather_to_all,
    rng_state,
    seed_everything,
    set_rng_state,
)
from kubetrain.runtime.stop import StopSignal, TrainingStopped
from kubetrain.runtime.wrapped import Wrapped

# A checkpoint written by another spec (a resumed or `continue`d job whose model changed).
MISFIT_HINT = "start fresh: another checkpoint.dir, or the controller's update policy recreate"


def model_misfit(model: dict[str, Any], saved: dict[str, Any]) -> str | None:
    """Why a saved model state cannot load into this model (missing, unexpected or reshaped parameters), in
    one line; None when it fits. torch's own error lists every key over many lines."""
    missing = [k for k in model if k not in saved]
    unexpected = [k for k in saved if k not in model]
    reshaped = [(k, tuple(saved[k].shape), tuple(v.shape)) for k, v in model.items()
                if k in saved and hasattr(v, "shape") and hasattr(saved[k], "shape") and saved[k].shape != v.shape]
    if reshaped:
        key, there, here = reshaped[0]
        more = f" and {len(reshaped) - 1} more" if len(reshaped) > 1 else ""
        return f"{key} has shape {list(there)} in the checkpoint, {list(here)} in the model{more}"
    if missing or unexpected:
        parts = [f"{len(missing)} parameters missing (e.g. {missing[0]})" if missing else "",
                 f"{len(unexpected)} unexpected (e.g. {unexpected[0]})" if unexpected else ""]
        return ", ".join(p for p in parts if p)
    return None


@dataclass
class FitResult:
    """How training ended (identical on every rank)."""

    step: int
    epoch: int
    total_steps: int
    loss: float | None
    eval_loss: float | None
    eval_accuracy: float | None
    resumed_from: str | None
    checkpoint: str | None
    skipped_steps: int = 0  # non-finite steps skipped (spec.divergence.policy skip)


_END = object()


def _pair(batch: Any) -> tuple[Any, Any]:
    if isinstance(batch, tuple | list) and len(batch) == 2:
        return batch[0], batch[1]
    raise RuntimeConfigError("spec.train.dataset: each sample must be an (input, target) pair, got "
                             f"{type(batch).__name__}")


@dataclass
class Loop:
    """All state of one training run on one rank. Positions: `step` counts optimizer steps, `epoch` the
    current epoch (0-based), `batch_in_epoch` the micro-batches of that epoch already trained on."""

    train: Train
    env: DistEnv
    wrapped: Wrapped
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler | None
    loss_fn: Callable[..., torch.Tensor]
    sampler: ResumableSampler
    loader: DataLoader[Any]
    eval_loader: DataLoader[Any] | None
    batches: int
    total_steps: int
    store: StoreBase | None  # a CheckpointStore (a directory) or an ObjectCheckpointStore (s3://, ...)
    resume: bool
    every_steps: int | None
    stop: StopSignal
    reporter: Reporter
    autocast: Callable[[], contextlib.AbstractContextManager[Any]]
    sharded: ShardedCheckpoints | None = None  # strategy fsdp: DCP directories instead of files
    profiler: StepProfiler | None = None  # train.profile, on the ranks that profile
    heartbeat: Heartbeat = field(default_factory=lambda: Heartbeat(0, 1, None))  # hang detection's signal
    divergence: Divergence = field(default_factory=Divergence)  # what a NaN or inf loss does
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    saved_step: int = -1
    last_checkpoint: str | None = None
    resumed_from: str | None = None
    last_loss: float | None = None
    eval_result: tuple[float | None, float | None] = (None, None)
    window: Window = field(init=False)
    guard: Guard = field(init=False)

    def __post_init__(self) -> None:
        self.window = Window(self.env.device)
        self.guard = Guard(self.divergence, self.env)

    # --- the loop -------------------------------------------------------------------------------------
    def run(self) -> FitResult:
        self._resume()
        self.reporter.emit("start", world_size=self.env.world_size, backend=self.env.backend,
                           device=str(self.env.device), epochs=self.train.epochs,
                           total_steps=self.total_steps, start_step=self.step, resumed_from=self.resumed_from)
        trained = False
        if self.profiler is not None:
            self.profiler.start()
        try:
            while self.epoch < self.train.epochs:
                self._train_epoch()
                trained = True
        finally:
            if self.profiler is not None:
                self.profiler.stop()
        if not trained and self.eval_loader is not None:
            self._evaluate()  # resumed from a finished run: still report its held-out metrics
        self._save("final")
        if self.guard.first is not None:  # policy continue: trained to the end, but it diverged
            self._diverge(*self.guard.first)
        self.reporter.emit("end", status="completed", step=self.step, epoch=self.epoch)
        return FitResult(self.step, self.epoch, self.total_steps, self.last_loss, *self.eval_result,
                         self.resumed_from, self.last_checkpoint, self.guard.skipped)

    def _train_epoch(self) -> None:
        self.sampler.set_epoch(self.epoch)
        self.sampler.skip(self.batch_in_epoch * self.train.batchSize)
        self.wrapped.module.train()
        self.window.reset()
        for index, batch in enumerate(self._batches(), start=self.batch_in_epoch):
            if self._micro_step(index, batch):
                self._after_step(index + 1)
        self.epoch += 1
        self.batch_in_epoch = 0
        if self.eval_loader is not None:
            self._evaluate()
        self._save("epoch")

    def _batches(self) -> Iterator[Any]:
        """The epoch's micro-batches (phase data while waiting for one)."""
        iterator = iter(self.loader)
        while True:
            self.heartbeat.phase("data")
            batch = next(iterator, _END)
            if batch is _END:
                return
            self.heartbeat.phase("train")
            yield batch

    def _batch_samples(self, index: int) -> int:
        """Samples in micro-batch `index` of an epoch: batchSize, except a short last one."""
        if index < self.batches - 1:
            return self.train.batchSize
        return int(self.sampler.num_samples) - (self.batches - 1) * self.train.batchSize

    def _loss_weight(self, index: int, group_start: int, group: int) -> float | None:
        """The factor that makes the accumulated gradient the mean over the group's *samples* (a short last
        micro-batch weighs by its size); None when no scaling is needed. Equal micro-batches keep the
        exact `loss / group` (identical floats to a hand-written loop)."""
        sizes = [self._batch_samples(i) for i in range(group_start, group_start + group)]
        if len(set(sizes)) == 1:
            return None if group == 1 else float(group)
        return sum(sizes) / sizes[index - group_start]

    def _micro_step(self, index: int, batch: Any) -> bool:
        """Forward and backward of one micro-batch; True when it completes an optimizer step. All but the
        last micro-batch of a group skip the gradient reduction (no_sync); the loss is weighted so that
        the accumulated gradient is the mean over the group's samples."""
        accum = self.train.gradAccumSteps
        group_start = index // accum * accum
        group = min(accum, self.batches - group_start)
        last = index == group_start + group - 1
        inputs, target = _pair(to_device(batch, self.env.device))
        sync = contextlib.nullcontext() if last else self.wrapped.no_sync()
        with sync:
            with self.autocast():
                loss = self.loss_fn(self.wrapped.forward(inputs), target)
            divisor = self._loss_weight(index, group_start, group)
            scaled = loss / divisor if divisor is not None else loss
            started = time.perf_counter()
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()  # type: ignore[no-untyped-call]
            self.heartbeat.collective(time.perf_counter() - started)  # DDP waits for the all-reduce in backward
        self.window.add(loss, batch_size_of(inputs))
        if last:
            self._end_step()
        return last

    def _end_step(self) -> None:
        """Apply the step's update, unless its loss is non-finite on any rank under policy skip: then the
        update never reaches the parameters, and the step is skipped (or the run stops as diverged past
        maxSkippedSteps). Policy stop only keeps the flags here (`_stop_if_diverged` reads them)."""
        value = self.guard.check(self.window.pending, self.step + 1)
        if value is None:
            self.guard.finite_step()
            self.window.commit()
            self._optimizer_step()
            return
        self.optimizer.zero_grad(set_to_none=True)
        self.window.discard()
        if not self.guard.skips(self.step + 1, value):
            self._diverge(self.step + 1, "loss", value)
        if self.scheduler is not None:
            self.scheduler.step()  # a skipped step still counts: the schedule stays on the step count
        self.step += 1

    def _stop_if_diverged(self) -> None:
        """Policy stop: the run ends as diverged at the first non-finite step checked, before anything after
        it is logged, evaluated or saved (a device sync: called only where the loop waits anyway)."""
        if (seen := self.guard.seen()) is not None:
            self._diverge(*seen)

    def _diverge(self, step: int, field: str, value: str) -> None:
        """End the run as diverged: publish checkpoints still in flight (written before), say so, raise."""
        self._publish_in_flight()
        value_field: dict[str, Any] = {field: NONFINITE_VALUES[value]}
        self.reporter.emit("end", status="diverged", step=step, epoch=self.epoch, **value_field)
        raise TrainingDiverged(step, field, value, self.last_checkpoint)

    def _optimizer_step(self) -> None:
        """Clip (after unscaling under fp16), step, update the scaler, zero gradients, step the scheduler."""
        clip = self.train.gradClip
        if self.scaler is not None:
            if clip is not None:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.wrapped.module.parameters(), clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(self.wrapped.module.parameters(), clip)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        self.step += 1

    def _after_step(self, consumed: int) -> None:
        self.batch_in_epoch = consumed
        self.heartbeat.step(self.step)
        if self.profiler is not None:
            self.profiler.step()
        if self.step % self.train.logEvery == 0:
            self._log()
        if self.every_steps and self.step % self.every_steps == 0 and consumed < self.batches:
            self._save("interval")  # the last step of an epoch is saved by the epoch checkpoint
        signum = self.stop.poll(self.step)
        if signum:
            self._save("signal")
            if self.env.world_size > 1:
                dist.barrier()  # nobody leaves before rank 0 has committed the checkpoint
            self.reporter.emit("end", status="stopped", step=self.step, epoch=self.epoch, signal=signum)
            raise TrainingStopped(signum, self.last_checkpoint)

    def _log(self) -> None:
        self._stop_if_diverged()
        loss, rate = self.window.read(self.env)
        self.last_loss = loss
        skipped: dict[str, Any] = {"skipped_steps": self.guard.skipped} if self.guard.skipped else {}
        self.reporter.emit("train", step=self.step, total_steps=self.total_steps, epoch=self.epoch + 1,
                           loss=loss, samples_per_s=round(rate, 2), lr=self.optimizer.param_groups[0]["lr"],
                           gpu_mem_mb=gpu_memory_mb(self.env.device), **skipped)
        self.window.reset()
        if (value := nonfinite_text(loss)) is not None:
            self.guard.note(self.step, "loss", value)  # policy continue (the others never log one)

    # --- evaluation -----------------------------------------------------------------------------------
    @torch.no_grad()
    def _evaluate(self) -> None:
        """Loss (and accuracy, for class logits) over the held-out set, each rank a disjoint shard."""
        assert self.eval_loader is not None
        self._stop_if_diverged()
        previous = self.heartbeat.current
        self.heartbeat.phase("eval")
        try:
            self._evaluate_all()
        finally:
            self.heartbeat.phase(previous)

    def _evaluate_all(self) -> None:
        assert self.eval_loader is not None
        module = self.wrapped.module
        module.eval()
        totals = torch.zeros(3, dtype=torch.float64, device=self.env.device)  # loss sum, correct, count
        classification = True
        inputs: Any = None
        padding = self._eval_padding()
        for batch in self.eval_loader:
            inputs, target = _pair(to_device(batch, self.env.device))
            with self.autocast():
                output = module(inputs)
                loss = self.loss_fn(output, target)
            count = batch_size_of(target)
            totals[0] += loss.detach().double() * count
            totals[2] += count
            classification = classification and output.dim() == 2 and target.dim() == 1
            if classification:
                totals[1] += (output.argmax(dim=1) == target).sum()
        for _ in range(padding):  # results unused: see _eval_padding
            with self.autocast():
                module(inputs)
        if self.env.world_size > 1:
            dist.all_reduce(totals)
        module.train()
        seen = max(float(totals[2]), 1.0)
        accuracy = round(float(totals[1]) / seen, 6) if classification else None
        self.eval_result = (float(totals[0]) / seen, accuracy)
        self.reporter.emit("eval", step=self.step, epoch=self.epoch, eval_loss=self.eval_result[0],
                           eval_accuracy=accuracy, samples=int(totals[2]))
        if (value := nonfinite_text(self.eval_result[0])) is not None:  # the same value on every rank
            if self.guard.checks_steps:
                self._diverge(self.step, "eval_loss", value)
            self.guard.note(self.step, "eval_loss", value)

    def _eval_padding(self) -> int:
        """Under fsdp every forward is a collective (parameter all-gathers), but held-out shards are not
        padded (exact metrics): a rank with fewer batches repeats its last forward this many times, so all
        ranks run the same number of forwards. Agreed before any eval forward (a collective)."""
        if self.wrapped.strategy != "fsdp" or self.env.world_size == 1 or self.eval_loader is None:
            return 0
        counts = torch.tensor([len(self.eval_loader)], device=self.env.device)
        dist.all_reduce(counts, op=dist.ReduceOp.MAX)
        return int(counts[0]) - len(self.eval_loader)

    # --- checkpoints ----------------------------------------------------------------------------------
    def _state(self, rngs: list[Any]) -> dict[str, Any]:
        weights = {} if self.sharded is not None else {
            "model": self.wrapped.module.state_dict(), "optimizer": self.optimizer.state_dict()}
        return {
            **weights,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "step": self.step, "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "samples_in_epoch": self.batch_in_epoch * self.train.batchSize,
            "world_size": self.env.world_size, "rng": rngs,
            # rank 0's points not sent to its trackers yet: a resume from here sends them (none is lost)
            "tracking_unsent": self.reporter.tracker.unsent() if self.reporter.tracker is not None else None,
        }

    def _save(self, reason: str) -> None:
        """A checkpoint at the current step (a collective: every rank calls it at the same step)."""
        self._stop_if_diverged()
        if self.store is None:
            return
        previous = self.heartbeat.current
        self.heartbeat.phase("checkpoint")
        try:
            self._save_now(reason)
        finally:
            self.heartbeat.phase(previous)

    def _save_now(self, reason: str) -> None:
        assert self.store is not None
        if self.saved_step != self.step and not state_is_finite(self.wrapped.module, self.optimizer, self.env):
            self.guard.say(f"{reason} checkpoint at step {self.step} not written: the parameters are not finite "
                           f"(the last good checkpoint stands: {self.last_checkpoint or 'none'})")
            if reason in ("final", "signal"):
                self._publish_in_flight()
            return
        if self.sharded is not None:
            self._save_sharded(reason)
            return
        if self.saved_step == self.step:
            return
        rngs = gather_to_all(rng_state(), self.env.world_size)
        if self.env.is_main:
            started = time.perf_counter()
            path = self.store.save(self._state(rngs), self.step)
            self.store.prune()
            self._report_checkpoint(self.step, path, reason, time.perf_counter() - started)
        self.saved_step = self.step

    def _save_sharded(self, reason: str) -> None:
        """Sharded (fsdp): save unless this step is saved; the final and the stop checkpoint must also be
        published before returning (an asynchronous save may still be in flight)."""
        assert self.sharded is not None
        published = []
        if self.saved_step != self.step:
            rngs = gather_to_all(rng_state(), self.env.world_size)
            published = self.sharded.save(self.wrapped.module, self.optimizer, self._state(rngs), self.step,
                                          reason)
            self.saved_step = self.step
        if reason in ("final", "signal"):
            published += self.sharded.flush()
        for done in published:
            self._report_checkpoint(done.step, done.path, done.reason, done.seconds, done.epoch)

    def _publish_in_flight(self) -> None:
        """Sharded (fsdp): publish asynchronous checkpoints still being written (of earlier steps)."""
        if self.sharded is not None:
            for done in self.sharded.flush():
                self._report_checkpoint(done.step, done.path, done.reason, done.seconds, done.epoch)

    def _report_checkpoint(self, step: int, path: Any, reason: str, seconds: float,
                           epoch: int | None = None) -> None:
        self.reporter.emit("checkpoint", step=step, epoch=self.epoch if epoch is None else epoch, path=str(path),
                           reason=reason, seconds=round(seconds, 3))
        self.last_checkpoint = str(path)

    def _resume(self) -> None:
        """Rank 0 picks the newest complete checkpoint; every rank loads that one."""
        if self.store is None or not self.resume:
            return
        chosen: tuple[Any, dict[str, Any] | None] | None = None
        if self.env.is_main:
            for partial in self.store.clean_partial():
                print(f"kubetrain.runtime: removed partial checkpoint {partial} (a write that did not finish)",
                      file=sys.stderr, flush=True)
            chosen = self._newest()
        path = broadcast_from_main(str(chosen[0]) if chosen else None, self.env.world_size)
        if path is None:
            return
        if self.sharded is not None:
            state = self.sharded.load(path, self.wrapped.module, self.optimizer)
        else:
            state = chosen[1] if chosen and chosen[1] is not None else self.store.load(path)
        self._apply(state, path)
        self.resumed_from = self.last_checkpoint = path
        self.saved_step = self.step
        self.reporter.emit("resume", step=self.step, epoch=self.epoch, batch_in_epoch=self.batch_in_epoch,
                           path=path)

    def _newest(self) -> tuple[Any, dict[str, Any] | None] | None:
        """Rank 0: the newest complete checkpoint of this strategy's kind (a file, or a sharded directory)."""
        assert self.store is not None
        newest = self.store.complete()
        sharded = bool(newest) and self.store.is_sharded(newest[0][1])
        if newest and sharded != (self.sharded is not None):
            writer = "fsdp" if sharded else "ddp or dp"
            raise RuntimeConfigError(f"spec.train.strategy: {self.train.strategy} cannot resume from "
                                     f"{newest[0][1]} (written by {writer}); use another checkpoint.dir or "
                                     "the strategy that wrote it")
        if self.sharded is None:
            return self.store.load_newest()
        return (newest[0][1], None) if newest else None

    def _apply(self, state: dict[str, Any], path: str) -> None:
        if "model" in state:  # sharded checkpoints loaded model and optimizer already
            problem = model_misfit(self.wrapped.module.state_dict(), state["model"])
            if problem:
                raise RuntimeConfigError(f"spec.train.model: checkpoint {path} does not fit the model: {problem} "
                                         f"({MISFIT_HINT})")
            self.wrapped.module.load_state_dict(state["model"])
            try:
                self.optimizer.load_state_dict(state["optimizer"])
            except (ValueError, KeyError) as exc:
                raise RuntimeConfigError(f"spec.train.optimizer: checkpoint {path} does not fit the optimizer: "
                                         f"{' '.join(str(exc).split())} ({MISFIT_HINT})") from None
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.epoch, self.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        if self.reporter.tracker is not None and state.get("tracking_unsent"):
            self.reporter.tracker.restore(state["tracking_unsent"])
        rngs = state.get("rng") or []
        if state.get("world_size") == self.env.world_size and self.env.rank < len(rngs):
            set_rng_state(rngs[self.env.rank])
        else:  # the world changed size (elastic): the shards changed, so resume approximately, with fresh
            # but deterministic per-rank streams, at the same per-rank position in the epoch
            self.batch_in_epoch = min(self.batch_in_epoch, self.batches)
            seed_everything(self.train.seed + self.env.rank + 1_000_003 * self.step)
