"""bf16 only where the GPU computes it natively, else fp16 with a GradScaler (fp32 under fsdp), in one line.
The GPU's capability query is the boundary faked here (no GPU on this machine); everything after it is real
torch on the CPU: the autocast dtype and the GradScaler the loop gets."""

from __future__ import annotations

import pytest
import torch

from kubetrain.runtime.distributed import DistEnv
from kubetrain.runtime.settings import Train
from kubetrain.runtime.trainer import fused_adamw
from kubetrain.runtime.wrap import autocast, grad_scaler, resolve_precision

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A GPU of the given compute capability, as torch.cuda reports it."""

    def install(name: str, capability: tuple[int, int]) -> None:
        def supported(including_emulation: bool = True) -> bool:
            return capability >= (8, 0) or including_emulation  # torch emulates bf16 on older GPUs

        monkeypatch.setattr(torch.cuda, "is_bf16_supported", supported)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)

    return install


def train(**fields: object) -> Train:
    return Train(model="m:f", dataset="m:d", **fields)  # type: ignore[arg-type]


def test_bf16_is_kept_on_ampere_and_newer(gpu, capsys) -> None:  # type: ignore[no-untyped-def]
    gpu("NVIDIA H100 80GB HBM3", (9, 0))
    chosen = resolve_precision(train(precision="bf16"), CUDA)
    assert chosen.precision == "bf16" and capsys.readouterr().err == ""


def test_a_v100_trains_in_fp16_with_a_grad_scaler_and_says_so(gpu, capsys) -> None:  # type: ignore[no-untyped-def]
    gpu("Tesla V100-SXM2-16GB", (7, 0))
    chosen = resolve_precision(train(precision="bf16"), CUDA)
    assert chosen.precision == "fp16"
    assert capsys.readouterr().err == (
        "kubetrain.runtime: warning: precision bf16 needs compute capability 8.0+ (Ampere or newer), and Tesla "
        "V100-SXM2-16GB is 7.0: training in fp16 with a GradScaler instead\n")
    assert isinstance(grad_scaler(chosen, CPU), torch.amp.GradScaler)
    with autocast(chosen, CPU):
        assert torch.get_autocast_dtype("cpu") == torch.float16


def test_fsdp_falls_back_to_fp32_which_needs_no_scaler(gpu, capsys) -> None:  # type: ignore[no-untyped-def]
    gpu("Tesla T4", (7, 5))
    chosen = resolve_precision(train(precision="bf16", strategy="fsdp"), CUDA)
    assert chosen.precision == "fp32" and grad_scaler(chosen, CPU) is None
    assert "Tesla T4 is 7.5: training in fp32 instead" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_other_precisions_and_cpus_are_left_alone(gpu, capsys, precision: str) -> None:  # type: ignore[no-untyped-def]
    gpu("Tesla V100-SXM2-16GB", (7, 0))
    assert resolve_precision(train(precision=precision), CUDA).precision == precision
    assert resolve_precision(train(precision="bf16"), CPU).precision == "bf16"  # CPU autocast has bf16
    assert capsys.readouterr().err == ""


def test_grad_scaler_only_for_fp16() -> None:
    assert [grad_scaler(train(precision=p), CPU) is not None for p in ("fp32", "bf16", "fp16")] == [False, False, True]


@pytest.mark.parametrize(("device", "strategy", "fused"), [
    ("cuda", "ddp", True), ("cuda", "dp", True), ("cuda", "fsdp", False), ("cpu", "ddp", False)])
def test_the_default_adamw_is_fused_on_cuda_except_under_fsdp(device: str, strategy: str, fused: bool) -> None:
    env = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device(device), backend="gloo")
    assert fused_adamw(Train(model="m:f", dataset="m:d", strategy=strategy), env) is fused
