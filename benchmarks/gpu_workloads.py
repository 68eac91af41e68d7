"""Realistic training workloads for `make gpu-check` (docs/gpu.md): a GPT-2-small-sized transformer on synthetic
tokens and a ResNet-50-sized CNN on synthetic images, each trained by the kubetrain Trainer and by a hand-tuned
loop of the same model, data and batch, in interleaved rounds; tokens or images per second and MFU for fp32,
bf16 and bf16 + torch.compile, medians over the rounds.

`--size full` is the GPU run (GPT-2 small: 12 layers, 768 wide, 1024 tokens, a 50,304-token vocabulary, 124 M
parameters; ResNet-50: bottleneck stages [3, 4, 6, 3], 224 x 224 images, 1,000 classes, 25.6 M parameters).
`--size tiny` is the same code at a size a CPU trains in seconds: tests/runtime/test_gpu_workloads.py runs it
in the suite, so the workload cannot rot between GPU runs.

    python benchmarks/gpu_workloads.py --size full --rounds 5 [--models gpt,resnet] [--out FILE.json]

FLOPs per sample are counted once per model by torch's own FlopCounterMode (forward and backward, on the meta
device); MFU is achieved FLOP/s over the GPU's datasheet dense bf16 peak (PEAK_BF16), for every precision, so
the three columns compare on one scale.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# Datasheet dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, by the name torch reports.
PEAK_BF16 = {"H200": 989.4, "H100 80GB HBM3": 989.4, "H100 SXM": 989.4, "H100 NVL": 835.0, "H100 PCIe": 756.0,
             "GH200": 989.4, "A100": 312.0, "L40S": 362.0, "L4": 121.0}
PRECISIONS = {"fp32": {}, "bf16": {"precision": "bf16"}, "bf16+compile": {"precision": "bf16", "compile": True}}


# --- the models ----------------------------------------------------------------------------------------
class Block(nn.Module):
    """A GPT-2 block: pre-norm causal self-attention (PyTorch's fused SDPA kernels) and a 4x GELU MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = (t.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(width, dim=2))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2's shape: learned positions, tied input and output embeddings."""

    def __init__(self, vocab: int, tokens: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(tokens, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3, 1x1 expand (x4), batch norm, a projected shortcut on a change."""

    def __init__(self, inputs: int, width: int, stride: int) -> None:
        super().__init__()
        out = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(inputs, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
        self.shortcut = (nn.Sequential(nn.Conv2d(inputs, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                         if stride != 1 or inputs != out else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-50's layout for uint8 images (scaled to [0, 1] on the device, the usual input pipeline)."""

    def __init__(self, stages: tuple[int, ...], base: int, classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base),
                                   nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
        inputs = base
        for index, blocks in enumerate(stages):
            width = base * 2 ** index
            for block in range(blocks):
                layers.append(Bottleneck(inputs, width, 2 if block == 0 and index > 0 else 1))
                inputs = 4 * width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float().div(255).contiguous(memory_format=torch.channels_last)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# --- synthetic data that can be learned (the loss must fall) ----------------------------------------------
class Counting(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Token sequences that count up from a random start by a per-sequence stride: the next token is
    predictable from the last two, so a transformer's loss falls within a few steps."""

    def __init__(self, samples: int, tokens: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(1)
        start = torch.randint(0, vocab, (samples, 1), generator=generator)
        stride = torch.randint(1, 8, (samples, 1), generator=generator)
        self.data = (start + stride * torch.arange(tokens + 1)) % vocab

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.data[index]
        return row[:-1], row[1:]


class Shapes(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """uint8 images whose class is the brightest of a few fixed regions (a pool of distinct images reused
    across the epoch, so the dataset costs megabytes, not gigabytes)."""

    def __init__(self, samples: int, size: int, classes: int, pool: int = 256) -> None:
        generator = torch.Generator().manual_seed(1)
        self.images = torch.randint(0, 128, (pool, 3, size, size), dtype=torch.uint8, generator=generator)
        self.labels = torch.randint(0, classes, (pool,), generator=generator)
        cell = max(size // 8, 1)
        for index, label in enumerate(self.labels.tolist()):
            row, col = divmod(label % 64, 8)
            self.images[index, :, row * cell:(row + 1) * cell, col * cell:(col + 1) * cell] = 255
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index % len(self.images)], self.labels[index % len(self.images)]


def token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())


@dataclasses.dataclass(frozen=True)
class Workload:
    """One model at one size: how to build it, its data, its loss, and what a sample is."""

    name: str
    unit: str  # what one sample holds: "tokens" (sequence length of them) or "images"
    per_sample: int  # units per sample
    batch: int
    lr: float
    model: Callable[[], nn.Module]
    data: Callable[[int], Dataset[Any]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def workloads(size: str) -> dict[str, Workload]:
    full = size == "full"
    vocab, tokens, width, layers, heads = (50304, 1024, 768, 12, 12) if full else (256, 32, 32, 2, 2)
    image, stages, base, classes = (224, (3, 4, 6, 3), 64, 1000) if full else (16, (1, 1, 1, 1), 4, 16)
    return {
        "gpt": Workload("gpt", "tokens", tokens, 16 if full else 4, 3e-4 if full else 3e-3,
                        lambda: GPT(vocab, tokens, width, layers, heads),
                        lambda n: Counting(n, tokens, vocab), token_loss),
        "resnet": Workload("resnet", "images", 1, 128 if full else 8, 1e-3,
                           lambda: ResNet(stages, base, classes).to(memory_format=torch.channels_last),
                           lambda n: Shapes(n, image, classes), F.cross_entropy),
    }


def flops_per_sample(workload: Workload) -> float:
    """Forward + backward FLOPs of one sample, counted by torch on the meta device (no memory, no time)."""
    from torch.utils.flop_counter import FlopCounterMode

    inputs, target = next(iter(DataLoader(workload.data(2), batch_size=2)))
    with torch.device("meta"):
        model = workload.model()
        inputs, target = inputs.to("meta"), target.to("meta")
        counter = FlopCounterMode(display=False)
        with counter:
            workload.loss(model(inputs), target).backward()
    return counter.get_total_flops() / 2


# --- the two ways to train it ----------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    side: str  # "trainer" or "hand"
    samples_per_s: float
    losses: list[float]

    @property
    def learned(self) -> bool:
        return len(self.losses) >= 2 and all(map(math.isfinite, self.losses)) and self.losses[-1] < self.losses[0]


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def trainer_run(workload: Workload, precision: dict[str, Any], warmup: int, steps: int) -> Run:
    """The kubetrain Trainer in this process (a world of one): samples/s over the windows after the first
    (which holds warm-up and compilation), read from its own metrics lines."""
    from kubetrain.jobspec.sections import Train
    from kubetrain.metrics import parse_metrics_line
    from kubetrain.runtime import Factories, Trainer

    train = Train(model="gpu_workloads:model", dataset="gpu_workloads:data", batchSize=workload.batch,
                  lr=workload.lr, seed=0, logEvery=warmup, epochs=1, **precision)
    stream = io.StringIO()
    Trainer(train, factories=Factories(model=workload.model, dataset=lambda: workload.data(workload.batch * steps),
                                       loss=lambda: workload.loss), stream=stream).fit()
    windows = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r and r["kind"] == "train"]
    timed = windows[1:]
    seconds = sum(warmup * workload.batch / w["samples_per_s"] for w in timed)
    return Run("trainer", len(timed) * warmup * workload.batch / seconds, [w["loss"] for w in windows])


def hand_loop(workload: Workload, precision: dict[str, Any], warmup: int, steps: int) -> Run:
    """What an engineer tunes by hand for one GPU: DDP (as the Trainer, for the same gradient path) with
    gradients as views of its buckets (no copy in and out of them), the whole DDP module compiled, fused
    AdamW, pinned memory with non-blocking copies, autocast, and no host sync inside the timed steps."""
    device = _device()
    cuda = device.type == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(workload.model().to(device), gradient_as_bucket_view=True,
                                                    device_ids=[device.index] if cuda else None)
        forward = torch.compile(model) if precision.get("compile") else model
        optimizer = torch.optim.AdamW(model.parameters(), lr=workload.lr, fused=cuda)
        loader = DataLoader(workload.data(workload.batch * steps), batch_size=workload.batch, shuffle=True,
                            pin_memory=cuda, generator=torch.Generator().manual_seed(0))
        autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision.get("precision") == "bf16"
                    else contextlib.nullcontext())
        losses, started = [], 0.0
        for step, (batch, labels) in enumerate(loader):
            if step == warmup:
                _sync(device)
                started = time.perf_counter()
            inputs, target = batch.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            with autocast:
                loss = workload.loss(forward(inputs), target)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % warmup == warmup - 1:
                losses.append(loss.detach())
        _sync(device)
        rate = (steps - warmup) * workload.batch / (time.perf_counter() - started)
        return Run("hand", rate, [float(x) for x in losses])
    finally:
        dist.destroy_process_group()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- rounds, medians, MFU --------------------------------------------------------------------------------
def peak_flops() -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((tflops * 1e12 for key, tflops in PEAK_BF16.items() if key in name), None)


def _fresh() -> None:
    """Between runs: forget compiled graphs (dynamo's cache keys on the DDP module, and after 8 recompiles it
    falls back to eager) and free the previous run's memory. Inductor's on-disk cache keeps recompiling short."""
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure(workload: Workload, name: str, precision: dict[str, Any], rounds: int, warmup: int,
            steps: int) -> dict[str, Any]:
    """Interleaved rounds (hand, Trainer, hand, Trainer, ...) of one model at one precision."""
    runs: dict[str, list[Run]] = {"hand": [], "trainer": []}
    for _ in range(rounds):
        for side, run in (("hand", hand_loop), ("trainer", trainer_run)):
            _fresh()
            runs[side].append(run(workload, precision, warmup, steps))
    flops, peak = flops_per_sample(workload), peak_flops()
    medians = {side: statistics.median(r.samples_per_s for r in done) for side, done in runs.items()}
    result: dict[str, Any] = {"model": workload.name, "precision": name, "batch": workload.batch,
                              "unit": workload.unit, "rounds": rounds, "steps": steps, "warmup": warmup,
                              "flops_per_sample": flops, "ratio": medians["trainer"] / medians["hand"],
                              "learned": all(r.learned for done in runs.values() for r in done)}
    for side, done in runs.items():
        result[side] = {"units_per_s": [round(r.samples_per_s * workload.per_sample, 1) for r in done],
                        "median_units_per_s": round(medians[side] * workload.per_sample, 1),
                        "mfu": round(medians[side] * flops / peak, 4) if peak else None,
                        "losses": [[round(x, 4) for x in r.losses] for r in done]}
    return result


def run_all(size: str, rounds: int, models: list[str], report: Callable[[dict[str, Any]], None],
            precisions: list[str] | None = None) -> list[dict[str, Any]]:
    warmup, steps = (5, 15) if size == "full" else (3, 9)
    results = []
    for key in models:
        workload = workloads(size)[key]
        for name in precisions or list(PRECISIONS):
            if name != "fp32" and not _bf16_ok():
                continue
            results.append(measure(workload, name, PRECISIONS[name], rounds, warmup, steps))
            report(results[-1])
    return results


def _bf16_ok() -> bool:
    return not torch.cuda.is_available() or torch.cuda.is_bf16_supported(including_emulation=False)


def verdict(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets: the Trainer at >= 0.97x the hand loop (median against median) in every cell; bf16 +
    compile faster than fp32 for each model; every loss fell."""
    by = {(r["model"], r["precision"]): r for r in results}
    faster = {model: by[(model, "bf16+compile")]["trainer"]["median_units_per_s"]
              > by[(model, "fp32")]["trainer"]["median_units_per_s"]
              for model, precision in by if precision == "fp32" and (model, "bf16+compile") in by}
    ratios_ok = all(r["ratio"] >= 0.97 for r in results)
    return {"ok": ratios_ok and all(faster.values()) and all(r["learned"] for r in results),
            "trainer_vs_hand_min_ratio": round(min(r["ratio"] for r in results), 3) if results else None,
            "bf16_compile_faster_than_fp32": faster, "target_ratio": 0.97}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| model | precision | hand (median) | Trainer (median) | Trainer / hand | MFU hand | MFU Trainer |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        hand, trainer = r["hand"], r["trainer"]
        lines.append(f"| {r['model']} | {r['precision']} | {hand['median_units_per_s']:,.0f} {r['unit']}/s "
                     f"| {trainer['median_units_per_s']:,.0f} {r['unit']}/s | {r['ratio']:.3f} "
                     f"| {_pct(hand['mfu'])} | {_pct(trainer['mfu'])} |")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("full", "tiny"), default="full")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default="gpt,resnet")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    results: list[dict[str, Any]] = []

    def report(result: dict[str, Any]) -> None:  # each cell as it is measured: a cut-off run keeps what it had
        results.append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))

    run_all(args.size, args.rounds, args.models.split(","), report, args.precisions.split(","))
    print(table(results))
    print(json.dumps(verdict(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
