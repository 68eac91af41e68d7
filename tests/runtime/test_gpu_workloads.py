"""The realistic GPU workloads of `make gpu-check` (benchmarks/gpu_workloads.py), scaled down to run on the CPU
here, so the code the next lent GPU runs at full size cannot rot: both models train through the Trainer and
through the hand-tuned loop, their FLOPs are counted, and the report renders."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gpu_workloads

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def test_both_models_train_through_the_trainer_and_the_hand_loop() -> None:
    seen: list[dict[str, Any]] = []
    results = gpu_workloads.run_all("tiny", 1, ["gpt", "resnet"], seen.append, ["fp32"])
    assert seen == results
    assert [(r["model"], r["precision"]) for r in results] == [("gpt", "fp32"), ("resnet", "fp32")]
    for result in results:
        for side in ("hand", "trainer"):
            rates, losses = result[side]["units_per_s"], result[side]["losses"][0]
            assert rates and all(rate > 0 for rate in rates), (result["model"], side)
            assert len(losses) == 3 and all(map(math.isfinite, losses)), (result["model"], side, losses)
        assert result["ratio"] > 0 and result["hand"]["mfu"] is None  # no GPU: no peak to compare with
    table = gpu_workloads.table(results)
    assert "| gpt | fp32 |" in table and "tokens/s" in table and "images/s" in table
    verdict = gpu_workloads.verdict(results)
    assert set(verdict) == {"ok", "trainer_vs_hand_min_ratio", "bf16_compile_faster_than_fp32", "target_ratio"}


def test_the_counted_flops_match_the_transformer_formula() -> None:
    """FlopCounterMode's count against the usual estimate (6 N + 12 L d T per token, N without the position
    embedding): MFU is only as right as this number."""
    workload = gpu_workloads.workloads("tiny")["gpt"]
    model = workload.model()
    tokens, layers, width = model.wpe.num_embeddings, len(model.blocks), model.ln_f.normalized_shape[0]
    params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    estimate = tokens * (6 * params + 12 * layers * width * tokens)
    assert gpu_workloads.flops_per_sample(workload) == pytest.approx(estimate, rel=0.05)


def test_the_verdict_holds_the_trainer_to_097_of_the_hand_loop() -> None:
    def cell(model: str, precision: str, hand: float, trainer: float) -> dict[str, Any]:
        return {"model": model, "precision": precision, "ratio": trainer / hand, "learned": True,
                "hand": {"median_units_per_s": hand}, "trainer": {"median_units_per_s": trainer}}

    good = [cell("gpt", "fp32", 100, 99), cell("gpt", "bf16+compile", 300, 297)]
    assert gpu_workloads.verdict(good)["ok"]
    assert not gpu_workloads.verdict([*good[:1], cell("gpt", "bf16+compile", 300, 280)])["ok"]  # 0.933
    assert not gpu_workloads.verdict([cell("gpt", "fp32", 100, 99), cell("gpt", "bf16+compile", 90, 90)])["ok"]
