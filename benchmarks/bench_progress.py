"""Benchmark: metrics lines per second through the progress renderer (kubetrain.observe.render).

Feeds N realistic lines (KUBETRAIN_METRICS train records, prefixed as `kubetrain run` prefixes them, with
one user line and one eval record per 100) through `Renderer.line`, in the plain mode (stderr not a
terminal: a progress line at most every 10 s) and the live mode (rich redraws at most every 0.1 s, into
a throw-away terminal). stdout and stderr go to io.StringIO. Reports the best of --repeat runs.

    .venv/bin/python benchmarks/bench_progress.py [--lines 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import time

from kubetrain.metrics import format_metrics
from kubetrain.observe.render import Renderer


def make_lines(count: int) -> list[str]:
    lines = []
    for step in range(1, count + 1):
        if step % 100 == 0:
            lines.append(f"[node-1 rank-0] epoch {step // 100} done")
            record = format_metrics("eval", rank=0, step=step, epoch=step // 100, eval_loss=0.1, eval_accuracy=0.97,
                                    samples=300)
        else:
            record = format_metrics("train", rank=0, step=step, total_steps=count, epoch=1 + step // 100,
                                    loss=1.0 / step, samples_per_s=7242.25, lr=0.00286, gpu_mem_mb=None)
        lines.append("[node-1 rank-0] " + record)
    return lines


def run(lines: list[str], live: bool) -> float:
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, live=live)
    start = time.perf_counter()
    for line in lines:
        renderer.line(line)
    elapsed = time.perf_counter() - start
    renderer.close()
    return len(lines) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lines = make_lines(args.lines)
    for live in (False, True):
        rates = [run(lines, live) for _ in range(args.repeat)]
        print(f"{'live' if live else 'plain'} mode: {max(rates):,.0f} lines/s (best of {args.repeat}; "
              f"median {sorted(rates)[len(rates) // 2]:,.0f}) for {len(lines):,} lines")


if __name__ == "__main__":
    main()
