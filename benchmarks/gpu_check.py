"""`make gpu-check`: what only a real NVIDIA GPU can tell, in one command, in under 10 minutes (docs/gpu.md).

On a machine with NVIDIA GPUs it
* runs the kubetrain runtime for real: DDP in fp32, bf16 and fp16 (GradScaler), torch.compile, FSDP2 with
  meta-device initialisation (fsdp.metaInit), and the profiler (its trace must hold CUDA kernels);
* measures the Trainer's throughput against a hand-written loop on the same model, data and batch (the ratio,
  best of interleaved rounds), and FSDP's peak memory against DDP's (`torch.cuda.max_memory_allocated`; on
  two or more GPUs over torchrun, where FSDP has something to shard);
* runs `kubetrain run` of examples/digits: the CPU spec (its ranks see no GPU), on one GPU (nccl), and on more
  nodes than GPUs (refused in one line);
* runs nvidia-smi the way `kubetrain gpu` does and feeds its real output through that command's parser
  (the raw output is kept in the report, to become a test fixture);
* writes one JSON and one markdown report (--out, default benchmarks/results/gpu-check/).

Without a GPU it says so in one line on stderr and exits 1; a failed check also exits 1. Not part of the CPU
test suite: tests/runtime/test_gpu_check.py checks only the no-GPU answer. Needs kubetrain installed with the
runtime extra (torch) and its dependencies; works on torch 2.11+ and Python 3.11+.

    python benchmarks/gpu_check.py [--out DIR] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu-check"
FEATURES, HIDDEN, CLASSES, BATCH, STEPS, LR, SEED = 1024, 4096, 16, 256, 120, 1e-3, 0
BIG_WIDTH, BIG_LAYERS = 4096, 8  # 512 MiB of fp32 weights, for the memory comparison


def no_gpu_reason() -> str | None:
    """Why this machine cannot run the check, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install 'kubetrain[runtime]')"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build; nothing checked"
    if not torch.cuda.is_available():
        return f"no NVIDIA GPU visible to torch {torch.__version__} (torch.cuda.is_available() is False)"
    return None


# --- the workload ---------------------------------------------------------------------------------------
def make_data(samples: int, features: int = FEATURES) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(samples, features, generator=generator)
    return TensorDataset(x, x[:, :CLASSES].argmax(dim=1))  # learnable: the loss must fall


def make_model() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def make_big() -> Any:
    from torch import nn

    return nn.Sequential(*(nn.Linear(BIG_WIDTH, BIG_WIDTH, bias=False) for _ in range(BIG_LAYERS)))


# --- one Trainer run ------------------------------------------------------------------------------------
def trainer_run(model: Callable[[], Any] = make_model, samples: int = BATCH * STEPS, features: int = FEATURES,
                **train: Any) -> dict[str, Any]:
    """A Trainer run in this process (a world of one over nccl): its metrics, peak memory and wall time."""
    import torch

    from kubetrain.jobspec.sections import Train
    from kubetrain.metrics import parse_metrics_line
    from kubetrain.runtime import Factories, Trainer

    settings = {"model": "gpu_check:model", "dataset": "gpu_check:data", "batchSize": BATCH, "lr": LR,
                "seed": SEED, "logEvery": 20, **train}
    stream = io.StringIO()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    result = Trainer(Train(**settings), factories=Factories(model=model, dataset=lambda: make_data(samples, features)),
                     stream=stream).fit()
    seconds = time.perf_counter() - started
    records = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r]
    steps = [r for r in records if r["kind"] == "train"]
    losses = [r["loss"] for r in steps]
    rates = [r["samples_per_s"] for r in steps[1:]]  # the first window holds warm-up (and compilation)
    return {"ok": result.step > 0, "step": result.step, "seconds": round(seconds, 2), "losses": losses,
            "samples_per_s": statistics.median(rates) if rates else None,
            "max_memory_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
            "learned": bool(losses) and losses[-1] < losses[0] and all(map(_finite, losses)),
            "records": [r for r in records if r["kind"] in ("start", "end", "profile")]}


def _finite(value: float) -> bool:
    return math.isfinite(value)


def hand_loop(samples: int = BATCH * STEPS) -> float:
    """The textbook single-GPU DDP loop on the same model and data; samples/s after warm-up."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader

    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(SEED)
        model = DistributedDataParallel(make_model().to(device), device_ids=[device.index])
        loader = DataLoader(make_data(samples), batch_size=BATCH, shuffle=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        loss_fn = torch.nn.CrossEntropyLoss()
        warmup, started = 20, 0.0
        for step, (inputs, labels) in enumerate(loader):
            if step == warmup:
                torch.cuda.synchronize()
                started = time.perf_counter()
            x, y = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
        torch.cuda.synchronize()
        return (len(loader) - warmup) * BATCH / (time.perf_counter() - started)
    finally:
        dist.destroy_process_group()


# --- the checks -----------------------------------------------------------------------------------------
def check_nvidia_smi() -> dict[str, Any]:
    from kubetrain.jobs.gpu import COMMAND, LIST_COMMAND, parse_query, with_slices

    query = subprocess.run(COMMAND, capture_output=True, text=True, timeout=60, check=True).stdout
    listing = subprocess.run(LIST_COMMAND, capture_output=True, text=True, timeout=60, check=True).stdout
    gpus = with_slices(parse_query(query), listing) if "MIG" in listing else parse_query(query)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    return {"ok": bool(gpus), "gpus": [dataclasses.asdict(g) for g in gpus],
            "driver": driver.splitlines()[0] if driver else None,
            "raw": {" ".join(COMMAND): query, " ".join(LIST_COMMAND): listing}}


def check_kubetrain_run(work: Path) -> dict[str, Any]:
    """`kubetrain run` (the README's main job) of examples/digits on this machine: the CPU spec as it is (2
    nodes; its ranks must see no GPU, as its pods do), the same spec with `gpusPerNode: 1` on one node (nccl on
    cuda:0), and on 2 nodes where this machine has fewer GPUs than 2 (refused before starting)."""
    import shutil

    import torch
    import yaml

    from kubetrain.metrics import parse_metrics_line

    project = work / "digits"
    shutil.copytree(REPO / "examples" / "digits", project)
    doc = yaml.safe_load((project / "kubetrain.yaml").read_text())
    doc["spec"]["train"]["epochs"] = 2
    doc["spec"]["volumes"][0]["mountPath"] = "/ckpt"
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out: dict[str, Any] = {}
    for name, spec in (("cpu-spec", {}), ("one-gpu", {"nodes": 1, "gpusPerNode": 1}),
                       ("too-many-gpus", {"nodes": torch.cuda.device_count() + 1, "gpusPerNode": 1})):
        path = project / f"{name}.yaml"
        checkpoint = {**doc["spec"]["checkpoint"], "dir": f"/ckpt/{name}"}  # each run trains from step 0
        path.write_text(yaml.safe_dump({**doc, "spec": {**doc["spec"], "checkpoint": checkpoint, **spec}}))
        done = subprocess.run([sys.executable, "-m", "kubetrain", "run", "-f", str(path), "--raw"], cwd=project,
                              capture_output=True, text=True, timeout=150, env=env, check=False)
        records = [r for r in map(parse_metrics_line, done.stdout.splitlines()) if r]
        starts = [r for r in records if r["kind"] == "start"]
        out[name] = {"exit": done.returncode, "starts": [{k: r.get(k) for k in ("world_size", "backend", "device")}
                                                         for r in starts],
                     "end": next((r for r in records if r["kind"] == "end"), None),
                     "stderr_tail": done.stderr[-600:],
                     "output_tail": "\n".join(line for line in done.stdout.splitlines()
                                              if not parse_metrics_line(line))[-1500:]}
    cpu, gpu, refused = out["cpu-spec"], out["one-gpu"], out["too-many-gpus"]
    out["ok"] = (cpu["exit"] == 0 and all(s["device"] == "cpu" and s["backend"] == "gloo" for s in cpu["starts"])
                 and gpu["exit"] == 0 and [s["device"] for s in gpu["starts"]] == ["cuda:0"]
                 and gpu["starts"][0]["backend"] == "nccl"
                 and refused["exit"] == 2 and "spec.gpusPerNode" in refused["stderr_tail"])
    return out


def check_runtime(work: Path) -> dict[str, Any]:
    import torch

    runs: dict[str, Any] = {}
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    configs: dict[str, dict[str, Any]] = {
        "ddp-fp32": {}, "ddp-bf16": {"precision": "bf16"}, "ddp-fp16": {"precision": "fp16"},
        "ddp-compile": {"compile": True},
        "fsdp-meta": {"strategy": "fsdp", "fsdp": {"metaInit": True}, "precision": "bf16" if bf16 else "fp32"},
        "profile": {"profile": {"dir": str(work / "profile"), "wait": 1, "warmup": 1, "active": 2}},
    }
    for name, train in configs.items():
        runs[name] = run_check(functools.partial(trainer_run, **train))
    traces = list((work / "profile").rglob("*.pt.trace.json"))
    kernels = sum(_kernel_events(path) for path in traces)
    runs["profile"]["cuda_kernels_in_trace"] = kernels
    runs["profile"]["ok"] = runs["profile"].get("ok", False) and kernels > 0
    ok = all(r.get("ok", False) and r.get("learned", False) for n, r in runs.items() if n != "profile")
    return {"ok": ok and runs["profile"]["ok"], "bf16_native": bf16, "runs": runs}


def _kernel_events(trace: Path) -> int:
    events = json.loads(trace.read_text()).get("traceEvents", [])
    return sum(1 for e in events if str(e.get("cat", "")).lower() == "kernel")


def check_throughput(rounds: int) -> dict[str, Any]:
    """Interleaved rounds (hand, Trainer, hand, Trainer...): the best of each side, and their ratio."""
    hand, trainer = [], []
    for _ in range(rounds):
        hand.append(hand_loop())
        rate = trainer_run()["samples_per_s"]
        trainer.append(rate or 0.0)
    ratio = max(trainer) / max(hand)
    return {"ok": ratio >= 0.9, "hand_samples_per_s": [round(h, 1) for h in hand],
            "trainer_samples_per_s": [round(t, 1) for t in trainer], "ratio": round(ratio, 3), "target": 0.9}


def check_memory(work: Path) -> dict[str, Any]:
    """FSDP (meta init) against DDP on the 512 MiB model: per-rank peak allocated memory."""
    import torch

    count = torch.cuda.device_count()
    if count >= 2:
        ranks = min(count, 8)
        result: dict[str, Any] = {"ranks": ranks}
        for strategy in ("ddp", "fsdp"):
            out = work / f"memory-{strategy}.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
                       __file__, "worker-memory", strategy, str(out)]
            subprocess.run(command, check=True, timeout=300, env={**os.environ, "PYTHONPATH": _pythonpath()})
            peaks = [json.loads(out.with_suffix(f".{rank}.json").read_text())["mib"] for rank in range(ranks)]
            result[f"{strategy}_max_memory_allocated_mib"] = max(peaks)
        result["ok"] = result["fsdp_max_memory_allocated_mib"] < result["ddp_max_memory_allocated_mib"]
        return result
    ddp = trainer_run(model=make_big, samples=BATCH * 8, features=BIG_WIDTH, epochs=1)
    fsdp = trainer_run(model=make_big, samples=BATCH * 8, features=BIG_WIDTH, epochs=1, strategy="fsdp",
                       fsdp={"metaInit": True})
    return {"ok": True, "ranks": 1, "note": "one GPU: FSDP has no other rank to shard across; run on 2+ GPUs "
            "to see the saving", "ddp_max_memory_allocated_mib": ddp["max_memory_allocated_mib"],
            "fsdp_max_memory_allocated_mib": fsdp["max_memory_allocated_mib"]}


def check_workloads(rounds: int, models: str, out: Path) -> dict[str, Any]:
    """GPT-2 small and ResNet-50 sized models, Trainer against a hand-tuned loop, fp32 / bf16 / bf16 + compile
    (benchmarks/gpu_workloads.py); each cell is written to OUT/workloads.json as soon as it is measured."""
    import gpu_workloads  # imports torch, which this script may only import once a GPU is known to be there

    results: list[dict[str, Any]] = []

    def keep(result: dict[str, Any]) -> None:
        results.append(result)
        out.mkdir(parents=True, exist_ok=True)
        (out / "workloads.json").write_text(json.dumps(results, indent=1) + "\n")
        print(f"gpu-check: workload {result['model']} {result['precision']}: Trainer/hand {result['ratio']:.3f}",
              file=sys.stderr, flush=True)

    gpu_workloads.run_all("full", rounds, models.split(","), keep)
    return {**gpu_workloads.verdict(results), "results": results, "table": gpu_workloads.table(results)}


def _pythonpath() -> str:
    return os.pathsep.join(filter(None, [str(REPO / "benchmarks"), str(REPO), os.environ.get("PYTHONPATH")]))


def worker_memory(strategy: str, out: Path) -> None:
    """Under torchrun: one Trainer run of the big model; each rank writes its peak to OUT.<rank>.json."""
    extra = {"strategy": "fsdp", "fsdp": {"metaInit": True}} if strategy == "fsdp" else {}
    run = trainer_run(model=make_big, samples=BATCH * 8 * int(os.environ["WORLD_SIZE"]), features=BIG_WIDTH, epochs=1,
                      **extra)
    out.with_suffix(f".{os.environ['RANK']}.json").write_text(json.dumps({"mib": run["max_memory_allocated_mib"]}))


def run_check(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = check()
    except Exception as exc:  # a failed check is reported, and the others still run
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result = {"ok": False, "error": last[:500]}
    result["check_seconds"] = round(time.perf_counter() - started, 1)
    return result


def environment() -> dict[str, Any]:
    import torch

    index = torch.cuda.current_device()
    nccl = torch.cuda.nccl.version()
    return {"gpu": torch.cuda.get_device_name(index),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
            "gpus": torch.cuda.device_count(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
            "python": platform.python_version(), "host": platform.node()}


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [f"# kubetrain gpu-check: {'passed' if report['ok'] else 'FAILED'}", "",
             f"{env['gpu']} (compute capability {env['capability']}, {env['gpus']} GPU(s)), driver "
             f"{report['checks'].get('nvidia-smi', {}).get('driver')}, torch {env['torch']}, CUDA {env['cuda']}, "
             f"NCCL {env['nccl']}, Python {env['python']}; {report['started']}, {report['seconds']} s.", "",
             "| check | result | details |", "|---|---|---|"]
    for name, check in report["checks"].items():
        details = {k: (_run_summary(v) if name == "kubetrain-run" and isinstance(v, dict) else v)
                   for k, v in check.items() if k not in ("ok", "raw", "runs", "gpus", "results", "table")}
        lines.append(f"| {name} | {'ok' if check.get('ok') else 'FAILED'} | `{json.dumps(details)[:300]}` |")
    runs = report["checks"].get("runtime", {}).get("runs", {})
    if runs:
        lines += ["", "| runtime run | result | samples/s | peak MiB | first → last loss |", "|---|---|---|---|---|"]
        for name, run in runs.items():
            losses = run.get("losses") or []
            trend = f"{losses[0]:.3f} → {losses[-1]:.3f}" if losses else run.get("error", "")
            lines.append(f"| {name} | {'ok' if run.get('ok') else 'FAILED'} | {run.get('samples_per_s')} | "
                         f"{run.get('max_memory_allocated_mib')} | {trend} |")
    table = report["checks"].get("workloads", {}).get("table")
    if table:
        lines += ["", "Realistic workloads (medians of interleaved rounds; MFU against the datasheet dense bf16 "
                  "peak):", "", table]
    return "\n".join(lines) + "\n"


def _run_summary(run: dict[str, Any]) -> str:
    placed = ", ".join(f"{s['backend']} on {s['device']}" for s in run.get("starts") or [])
    return f"exit {run.get('exit')}" + (f", {placed}" if placed else "")


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kubetrain-gpu-check-") as directory:
        yield Path(directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="what only a real NVIDIA GPU can tell (docs/gpu.md)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for gpu-check.json and .md")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the throughput comparison")
    parser.add_argument("--workload-rounds", type=int, default=5, help="interleaved rounds of each workload cell")
    parser.add_argument("--workloads", default="gpt,resnet", help="realistic workloads to run (none: '')")
    args = parser.parse_args(argv)
    if reason := no_gpu_reason():
        print(f"gpu-check: {reason}", file=sys.stderr)
        return 1
    started, clock = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.perf_counter()
    with _workdir() as work:
        checks = {"nvidia-smi": run_check(check_nvidia_smi), "runtime": run_check(lambda: check_runtime(work)),
                  "throughput": run_check(lambda: check_throughput(args.rounds)),
                  "memory": run_check(lambda: check_memory(work)),
                  "kubetrain-run": run_check(lambda: check_kubetrain_run(work))}
        if args.workloads:
            checks["workloads"] = run_check(lambda: check_workloads(args.workload_rounds, args.workloads, args.out))
    report = {"ok": all(c.get("ok") for c in checks.values()), "started": started,
              "seconds": round(time.perf_counter() - clock, 1), "environment": environment(), "checks": checks}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (args.out / "gpu-check.md").write_text(markdown(report))
    print(markdown(report), end="")
    print(f"gpu-check: report in {args.out / 'gpu-check.json'} and gpu-check.md", file=sys.stderr)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker-memory":
        worker_memory(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit(main())
