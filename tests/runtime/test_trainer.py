"""The Trainer in one process (a world of one on gloo): features, numerics, checkpoints, SIGTERM + resume."""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.torchmod import require_torch

torch = require_torch()
from torch import nn  # noqa: E402
from torch.utils.data import Dataset, TensorDataset  # noqa: E402

from kubetrain.metrics import parse_metrics_line  # noqa: E402
from kubetrain.runtime import CheckpointStore, Factories, Trainer, TrainingStopped  # noqa: E402
from kubetrain.runtime.config import RuntimeConfigError, load_config, resolve_ref  # noqa: E402
from kubetrain.runtime.distributed import DistEnv  # noqa: E402
from kubetrain.runtime.settings import DDP, Checkpoint, Train  # noqa: E402
from kubetrain.runtime.wrap import apply_activation_checkpointing, convert_sync_batchnorm, ddp_kwargs, grad_scaler  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.timeout(120)]
torch.set_num_threads(1)


def blobs(n: int = 96, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())


def mlp(dropout: float = 0.0) -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))


def factories(dataset: Any = None, **kwargs: Any) -> Factories:
    return Factories(model=kwargs.pop("model", mlp), dataset=dataset or (lambda: (blobs(), blobs(48, 1))), **kwargs)


def sgd(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr)


def fit(train: Train, facs: Factories, checkpoint: Checkpoint | None = None) -> tuple[Any, list[dict[str, Any]]]:
    stream = io.StringIO()
    trainer = Trainer(train, checkpoint, facs, stream=stream)
    result = trainer.fit()
    return result, [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r]


def params_after(train: Train, facs: Factories) -> list[Any]:
    captured: list[nn.Module] = []
    original = facs.model

    def build() -> nn.Module:
        captured.append(original())
        return captured[0]

    fit(train, Factories(build, facs.dataset, facs.loss, facs.optimizer, facs.scheduler))
    return [p.detach().clone() for p in captured[0].parameters()]


def test_fit_learns_and_reports_metrics() -> None:
    result, lines = fit(Train(model="m:f", dataset="m:d", epochs=8, batchSize=16, lr=0.05, logEvery=3), factories())
    kinds = [r["kind"] for r in lines]
    assert kinds[0] == "start" and kinds[-1] == "end" and "train" in kinds and kinds.count("eval") == 8
    train = [r for r in lines if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(3, 49, 3))  # 6 steps per epoch, every 3rd logged
    assert {"epoch", "loss", "samples_per_s", "lr", "gpu_mem_mb", "total_steps"} <= set(train[0])
    assert train[-1]["loss"] < train[0]["loss"]
    assert result.step == 48 and result.eval_accuracy is not None and result.eval_accuracy > 0.85


def test_gradient_accumulation_equals_the_large_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 micro-batches of 8 with gradAccumSteps=2 = batches of 16, 16 and 8 (the last group is short)."""
    calls = []
    original = torch.nn.parallel.DistributedDataParallel.no_sync

    def counting(self: Any) -> Any:
        calls.append(1)
        return original(self)

    monkeypatch.setattr(torch.nn.parallel.DistributedDataParallel, "no_sync", counting)
    facs = factories(dataset=lambda: blobs(40), optimizer=sgd)
    big = params_after(Train(model="m:f", dataset="m:d", batchSize=16, lr=0.5), facs)
    assert calls == []
    small = params_after(Train(model="m:f", dataset="m:d", batchSize=8, gradAccumSteps=2, lr=0.5), facs)
    assert len(calls) == 2  # micro-batches 0 and 2 skip the allreduce; 1, 3 and 4 end a group
    for a, b in zip(big, small, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    plain = params_after(Train(model="m:f", dataset="m:d", batchSize=8, lr=0.5), facs)
    assert not all(torch.allclose(a, b) for a, b in zip(big, plain, strict=True))


def test_gradient_clipping_bounds_the_update() -> None:
    facs = factories(dataset=lambda: blobs(16), optimizer=sgd)
    start = [p.detach().clone() for p in (torch.manual_seed(0), mlp())[1].parameters()]
    clipped = params_after(Train(model="m:f", dataset="m:d", batchSize=16, lr=1.0, gradClip=1e-3), facs)
    free = params_after(Train(model="m:f", dataset="m:d", batchSize=16, lr=1.0), facs)

    def moved(after: list[Any]) -> float:
        return float(torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(after, start, strict=True))))

    assert moved(clipped) <= 1e-3 * 1.0001 < moved(free)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(precision: str) -> None:
    result, lines = fit(Train(model="m:f", dataset="m:d", epochs=6, batchSize=16, lr=0.05, precision=precision,
                              gradClip=1.0, logEvery=6), factories())
    losses = [r["loss"] for r in lines if r["kind"] == "train"]
    assert losses[-1] < losses[0] and result.eval_accuracy is not None and result.eval_accuracy > 0.6


def test_grad_scaler_only_for_fp16() -> None:
    cpu = torch.device("cpu")
    assert grad_scaler(Train(model="m:f", dataset="m:d", precision="bf16"), cpu) is None
    assert grad_scaler(Train(model="m:f", dataset="m:d"), cpu) is None
    assert isinstance(grad_scaler(Train(model="m:f", dataset="m:d", precision="fp16"), cpu), torch.amp.GradScaler)


def test_scheduler_steps_once_per_optimizer_step() -> None:
    made: list[Any] = []

    def scheduler(optimizer: torch.optim.Optimizer, total_steps: int) -> Any:
        made.append((torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.0, total_iters=total_steps), total_steps))
        return made[0][0]

    result, lines = fit(Train(model="m:f", dataset="m:d", epochs=2, batchSize=8, gradAccumSteps=3, logEvery=1),
                        factories(scheduler=scheduler))
    sched, total = made[0]
    assert total == result.total_steps == 2 * 4  # 12 micro-batches per epoch -> 4 optimizer steps
    assert sched.last_epoch == total and sched.get_last_lr()[0] == 0.0
    lrs = [r["lr"] for r in lines if r["kind"] == "train"]
    assert lrs == sorted(lrs, reverse=True) and len(set(lrs)) == len(lrs)


def test_activation_checkpointing_keeps_names_and_gradients() -> None:
    torch.manual_seed(0)
    plain, wrapped = mlp(), mlp()
    wrapped.load_state_dict(plain.state_dict())
    assert apply_activation_checkpointing(wrapped) == 2  # the two Linear layers
    assert list(wrapped.state_dict()) == list(plain.state_dict())
    x = torch.randn(5, 4, requires_grad=True)
    for model in (plain, wrapped):
        model(x).square().sum().backward()
    for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    _, lines = fit(Train(model="m:f", dataset="m:d", batchSize=16, activationCheckpointing=True), factories())
    assert lines[-1]["status"] == "completed"


def test_sync_batchnorm(capsys: pytest.CaptureFixture[str]) -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    assert convert_sync_batchnorm(model, torch.device("cpu")) is model
    assert "syncBatchNorm needs a GPU" in capsys.readouterr().err
    converted = convert_sync_batchnorm(model, torch.device("cuda", 0))
    assert isinstance(converted[1], nn.SyncBatchNorm)


def test_compile_wraps_the_ddp_model(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []
    original = torch.compile

    def eager_compile(model: Any, **kwargs: Any) -> Any:  # dynamo for real, without minutes of C++ codegen
        compiled.append(model)
        return original(model, backend="eager", **kwargs)

    monkeypatch.setattr(torch, "compile", eager_compile)
    result, _ = fit(Train(model="m:f", dataset="m:d", epochs=3, batchSize=16, lr=0.05, compile=True), factories())
    assert isinstance(compiled[0], torch.nn.parallel.DistributedDataParallel)
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.6


def test_ddp_options_reach_ddp() -> None:
    env = DistEnv(0, 1, 0, 1, torch.device("cpu"), "gloo")
    options = DDP(findUnusedParameters=True, staticGraph=True, gradientAsBucketView=False, bucketCapMb=4)
    assert ddp_kwargs(options, env) == {"device_ids": None, "find_unused_parameters": True, "static_graph": True,
                                        "gradient_as_bucket_view": False, "bucket_cap_mb": 4}
    cuda = DistEnv(0, 1, 1, 2, torch.device("cuda", 1), "nccl")
    assert ddp_kwargs(DDP(), cuda)["device_ids"] == [1]


def test_bad_references_and_config_are_one_line_errors() -> None:
    with pytest.raises(RuntimeConfigError) as info:
        resolve_ref("x.y:build", "spec.train.model")
    assert str(info.value) == "spec.train.model: cannot import 'x.y': No module named 'x'"
    with pytest.raises(RuntimeConfigError, match=r"spec\.train\.loss: module 'os' has no attribute 'nope'"):
        resolve_ref("os:nope", "spec.train.loss")
    with pytest.raises(RuntimeConfigError, match="KUBETRAIN_CONFIG: invalid JSON"):
        load_config({"KUBETRAIN_CONFIG": "{"})
    with pytest.raises(RuntimeConfigError, match=r"^spec\.train\.epochs: "):
        load_config({"KUBETRAIN_CONFIG": '{"train": {"model": "a:b", "dataset": "a:c", "epochs": 0}}'})
    with pytest.raises(RuntimeConfigError, match=r"spec\.train\.model: the factory returned int"):
        Trainer(Train(model="m:f", dataset="m:d"), factories=factories(model=lambda: 3)).fit()


def test_checkpoint_store_is_atomic_and_keeps_the_newest(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (5, 10, 15):
        store.save({"step": step, "w": torch.full((3,), float(step))}, step)
        store.prune()
    assert [s for s, _ in store.complete()] == [15, 10]
    (tmp_path / ".tmp-step-0000000020.pt.123").write_bytes(b"half a checkpoint")  # a writer died here
    (tmp_path / "step-0000000025.pt").write_bytes(b"PK\x03\x04 damaged")  # a damaged complete file
    path, state = store.load_newest()
    assert path.name == "step-0000000015.pt" and state["step"] == 15
    assert store.clean_partial() == [tmp_path / ".tmp-step-0000000020.pt.123"]


class SignalAt(Dataset[Any]):
    """Sends SIGTERM to this process when sample `at` is loaded (once), like a pod eviction mid-epoch."""

    def __init__(self, inner: Dataset[Any], at: int | None) -> None:
        self.inner, self.at = inner, at

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        if self.at is not None and index == self.at:
            self.at = None
            os.kill(os.getpid(), signal.SIGTERM)
        return self.inner[index]


def test_sigterm_checkpoints_and_resume_is_bit_identical(tmp_path: Path) -> None:
    train = Train(model="m:f", dataset="m:d", epochs=3, batchSize=8, lr=0.05, seed=3, logEvery=100)
    make = functools.partial(factories, model=lambda: mlp(dropout=0.3),
                             scheduler=lambda opt, total: torch.optim.lr_scheduler.LinearLR(opt, 1, 0.1, total))
    ckpt = functools.partial(Checkpoint, everySteps=5, keep=10)
    fit(train, make(dataset=lambda: (SignalAt(blobs(), None), blobs(48, 1))), ckpt(dir=str(tmp_path / "a")))
    with pytest.raises(TrainingStopped) as stopped:
        fit(train, make(dataset=lambda: (SignalAt(blobs(), 50), blobs(48, 1))), ckpt(dir=str(tmp_path / "b")))
    assert stopped.value.exit_code == 143 and stopped.value.checkpoint is not None
    signal_step = int(Path(stopped.value.checkpoint).stem.split("-")[1])
    assert 0 < signal_step < 36 and signal_step % 5 != 0  # mid-epoch, off the regular schedule
    result, lines = fit(train, make(dataset=lambda: (SignalAt(blobs(), None), blobs(48, 1))),
                        ckpt(dir=str(tmp_path / "b")))
    assert lines[0]["kind"] == "resume" and lines[0]["step"] == signal_step and result.step == 36
    assert lines[1]["kind"] == "start" and lines[1]["start_step"] == signal_step
    reference = torch.load(tmp_path / "a" / "step-0000000036.pt", weights_only=True)
    resumed = torch.load(tmp_path / "b" / "step-0000000036.pt", weights_only=True)
    for key, tensor in reference["model"].items():
        assert torch.equal(tensor, resumed["model"][key]), key
    assert reference["optimizer"]["state"].keys() == resumed["optimizer"]["state"].keys()
    for index, state in reference["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(resumed["optimizer"]["state"][index][name]))


def test_resuming_a_checkpoint_of_another_model_is_a_one_line_refusal(tmp_path: Path) -> None:
    # What `continue` (the controller's update policy) does after a changed model: the runtime refuses the
    # old checkpoint in one line (exit 2) instead of torch's many-line load_state_dict error.
    train = Train(model="m:f", dataset="m:d", epochs=1, batchSize=8, lr=0.05, seed=3, logEvery=100)
    ckpt = Checkpoint(dir=str(tmp_path), everySteps=5)
    fit(train, factories(), ckpt)
    wider = lambda: nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 3))  # noqa: E731
    with pytest.raises(RuntimeConfigError) as info:
        fit(train, factories(model=wider), ckpt)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == 2
    assert message.startswith(f"spec.train.model: checkpoint {tmp_path}/step-0000000012.pt does not fit the "
                              "model: 0.weight has shape [16, 4] in the checkpoint, [32, 4] in the model and 2 "
                              "more ("), message
    # The same model resumes (the check refuses only what cannot load).
    result, lines = fit(dataclasses.replace(train, epochs=2), factories(), ckpt)
    assert lines[0]["kind"] == "resume" and result.step == 24
