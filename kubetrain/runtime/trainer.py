"""The Trainer API: name model/dataset/loss/optimizer/scheduler factories, kubetrain runs the DDP loop.

    from kubetrain.runtime import Trainer
    from kubetrain.runtime.settings import Checkpoint, Divergence, Train   # or the spec's, kubetrain.jobspec.sections

    Trainer(Train(model="digits.train:build_model", dataset="digits.train:build_datasets", epochs=5),
            Checkpoint(dir="/ckpt", everySteps=50)).fit()

fit() returns a FitResult, or raises TrainingStopped (a signal) or TrainingDiverged (a non-finite loss,
spec.divergence).
"""

from __future__ import annotations

import functools
import gc
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import torch
from torch import nn

from kubetrain.runtime.config import RuntimeConfigError, resolve_ref
from kubetrain.runtime.data import ResumableSampler, ShardSampler, make_loader, split_datasets
from kubetrain.runtime.distributed import DistEnv, distributed
from kubetrain.runtime.divergence import TrainingDiverged
from kubetrain.runtime.heartbeat import Heartbeat
from kubetrain.runtime.loop import FitResult, Loop
from kubetrain.runtime.objstore import open_store
from kubetrain.runtime.profile import make_profiler
from kubetrain.runtime.report import Reporter
from kubetrain.runtime.settings import Checkpoint, Divergence, Train, as_settings
from kubetrain.runtime.sharded import ShardedCheckpoints
from kubetrain.runtime.state import seed_everything
from kubetrain.runtime.stop import StopSignal, TrainingStopped
from kubetrain.runtime.trackers import open_tracker
from kubetrain.runtime.tracking import Tracker, load_tracking
from kubetrain.runtime.wrap import (
    autocast,
    grad_scaler,
    meta_device,
    resolve_precision,
    warn_slow_precision,
    wrap_model,
)

if TYPE_CHECKING:
    from kubetrain.jobspec import sections

__all__ = ["Factories", "FitResult", "Trainer", "TrainingDiverged", "TrainingStopped"]


@dataclass
class Factories:
    """The user's code as callables; `from_train` imports them from the spec's 'module:function' refs."""

    model: Callable[[], nn.Module]
    dataset: Callable[[], Any]
    loss: Callable[[], Callable[..., torch.Tensor]] | None = None
    optimizer: Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer] | None = None
    scheduler: Callable[[torch.optim.Optimizer, int], Any] | None = None

    @classmethod
    def from_train(cls, train: Train) -> Factories:
        def ref(name: str) -> Callable[..., Any] | None:
            value = getattr(train, name)
            return resolve_ref(value, f"spec.train.{name}") if value else None

        model, dataset = ref("model"), ref("dataset")
        assert model is not None and dataset is not None  # required fields of Train
        return cls(model, dataset, ref("loss"), ref("optimizer"), ref("scheduler"))


def _build(factory: Callable[..., Any], field: str, expected: type | tuple[type, ...], *args: Any) -> Any:
    value = factory(*args)
    if not isinstance(value, expected):
        raise RuntimeConfigError(f"spec.train.{field}: the factory returned {type(value).__name__}, expected "
                                 f"{getattr(expected, '__name__', expected)}")
    return value


def _optimizer(factories: Factories, model: nn.Module, lr: float, fused: bool) -> torch.optim.Optimizer:
    if factories.optimizer is None:
        return torch.optim.AdamW(model.parameters(), lr=lr, fused=fused or None)
    return _build(factories.optimizer, "optimizer", torch.optim.Optimizer, model.parameters(), lr)  # type: ignore[no-any-return]


def fused_adamw(train: Train, env: DistEnv) -> bool:
    """The default AdamW runs fused on CUDA (one kernel over all parameters, torch's fastest implementation
    there; its default is the multi-tensor one). Not under fsdp, whose sharded (DTensor) parameters keep
    torch's default."""
    return env.device.type == "cuda" and train.strategy != "fsdp"


def _loss_fn(factories: Factories) -> Callable[..., torch.Tensor]:
    if factories.loss is None:
        return nn.CrossEntropyLoss()
    loss = factories.loss()
    if not callable(loss):
        raise RuntimeConfigError(f"spec.train.loss: the factory returned {type(loss).__name__}, expected a "
                                 "loss module or function")
    return loss


class Trainer:
    """Runs `train` (the spec's Train section) with checkpoints in `checkpoint.dir`, on every rank;
    `divergence` says what a non-finite loss does (default: stop). Each section is kubetrain.runtime.settings'
    or the spec's own model (kubetrain.jobspec.sections), which has the same fields."""

    def __init__(self, train: Train | sections.Train, checkpoint: Checkpoint | sections.Checkpoint | None = None,
                 factories: Factories | None = None, *, stream: TextIO | None = None,
                 divergence: Divergence | sections.Divergence | None = None) -> None:
        self.train = as_settings(Train, train, "spec.train")
        self.checkpoint = as_settings(Checkpoint, checkpoint or Checkpoint(), "spec.checkpoint")
        self.divergence = as_settings(Divergence, divergence or Divergence(), "spec.divergence")
        self.factories = factories or Factories.from_train(self.train)
        self.stream = stream

    def fit(self) -> FitResult:
        """Train to the end (or raise TrainingStopped after a stop checkpoint, TrainingDiverged on a
        non-finite loss). The process group is created here and destroyed on every exit path."""
        stop: StopSignal | None = None
        try:
            with distributed(self.train.backend, self.train.timeoutSeconds) as env:
                loop = self._setup(env)
                stop = loop.stop
                stop.install()
                loop.heartbeat.start()
                try:
                    return loop.run()
                finally:
                    loop.heartbeat.stop()
                    loop.reporter.close_tracker()
                    stop.uninstall()
                    stop.drain()
                    del loop  # drop the model and optimizer before the process group goes
                    gc.collect()
        finally:
            if stop is not None:
                stop.cancel()  # stopping is done: the watchdog must not kill a caller that carries on

    def _setup(self, env: DistEnv) -> Loop:
        train, factories = self.train, self.factories
        seed_everything(train.seed)  # identical data split and initial weights on every rank
        train_set, eval_set = split_datasets(factories.dataset())
        with meta_device(train):  # fsdp.metaInit: no tensor of the full model is allocated here
            model = _build(factories.model, "model", nn.Module)
        seed_everything(train.seed + env.rank)  # per-rank streams (dropout, augmentation)
        train = resolve_precision(train, env.device)
        warn_slow_precision(train, env.device)
        wrapped = wrap_model(model, train, env)
        optimizer = _optimizer(factories, model, train.lr, fused_adamw(train, env))
        sampler = ResumableSampler(train_set, env, train.seed)
        loader_for = functools.partial(make_loader, batch_size=train.batchSize, num_workers=train.numWorkers,
                                       env=env, seed=train.seed)
        loader = loader_for(train_set, sampler)
        eval_loader = (loader_for(eval_set, ShardSampler(len(eval_set), env))  # type: ignore[arg-type]
                       if eval_set is not None else None)
        batches = len(loader)
        total_steps = train.epochs * math.ceil(batches / train.gradAccumSteps)
        scheduler = factories.scheduler(optimizer, total_steps) if factories.scheduler else None
        store = open_store(self.checkpoint.dir, self.checkpoint.keep) if self.checkpoint.dir else None
        reporter = Reporter(env, self.stream, self._tracker(env))
        sharded = (ShardedCheckpoints(store, env, train.fsdp.asyncCheckpoint)
                   if store is not None and train.strategy == "fsdp" else None)
        return Loop(
            train=train, env=env, wrapped=wrapped, optimizer=optimizer, scheduler=scheduler,
            scaler=grad_scaler(train, env.device), loss_fn=_loss_fn(factories),
            sampler=sampler, loader=loader, eval_loader=eval_loader, batches=batches, total_steps=total_steps,
            store=store, resume=self.checkpoint.resume, every_steps=self.checkpoint.everySteps,
            stop=StopSignal(env, self.checkpoint.sigtermTimeoutSeconds, checkpointing=store is not None),
            reporter=reporter, autocast=lambda: autocast(train, env.device), sharded=sharded,
            profiler=make_profiler(train.profile, env, reporter),
            heartbeat=Heartbeat.from_env(env.rank, env.world_size), divergence=self.divergence,
        )

    def _tracker(self, env: DistEnv) -> Tracker | None:
        """spec.tracking's trackers on rank 0 (their threads connect while the loop starts)."""
        config = load_tracking()
        if config is None or not env.is_main:
            return None
        return open_tracker(config, self.checkpoint.dir)


def describe(result: FitResult) -> str:
    """A one-line human summary of a FitResult (for logs)."""
    parts = [f"step {result.step}/{result.total_steps}", f"epoch {result.epoch}"]
    if result.eval_accuracy is not None:
        parts.append(f"held-out accuracy {result.eval_accuracy:.4f}")
    if result.skipped_steps:
        parts.append(f"{result.skipped_steps} non-finite step(s) skipped")
    if result.checkpoint:
        parts.append(f"checkpoint {Path(result.checkpoint).name}")
    return ", ".join(parts)

