"""Benchmark: what spec.divergence's per-step check costs the Trainer (docs/performance.md).

Policy stop (the default) checks each optimizer step's loss: a 3-element all_reduce of the nan/+inf/-inf
flags per step, read on the host only at metrics lines, evaluations, checkpoints and the end. Policy continue
checks nothing per step. Both sides
are bench_runtime.py's Trainer workload (2 processes, gloo, CPU, MLP 256-1024-1024-10, batch 64 per
process), run in alternating order for `--rounds` rounds; the ratio of the fastest run of each side is
reported (on a shared VM interference only slows runs down).

    python benchmarks/bench_divergence.py --rounds 5

Not a test: numbers depend on the machine. torch is needed (pip install -e '.[runtime,examples]').
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench_runtime import launch, throughput

SIDES = ("trainer", "trainer-continue")  # policy stop (checked steps), policy continue (unchecked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=16384, help="training samples per epoch")
    args = parser.parse_args()
    log_every = 32
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for side in SIDES[index % 2:] + SIDES[:index % 2]:
                records = launch(side, args.samples, 1, log_every, Path(tmp) / f"{side}-{index}.pt")
                rates[side].append(throughput(records, warmup_step=log_every))
                print(f"round {index + 1} {side}: {rates[side][-1]:,.0f} samples/s", flush=True)
    best = {side: max(values) for side, values in rates.items()}
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    for side in SIDES:
        print(f"{side}: fastest {best[side]:,.0f} samples/s (all: {', '.join(f'{r:,.0f}' for r in rates[side])})")
    print(f"ratio stop / continue (fastest of each): {best['trainer'] / best['trainer-continue']:.3f}")


if __name__ == "__main__":
    main()
