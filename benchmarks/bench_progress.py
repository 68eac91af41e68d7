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
import os
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


def run(lines: list[str], live: bool) -> tuple[float, float]:
    """(lines per wall second, lines per CPU second of this process: what a loaded machine leaves us)."""
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, live=live)
    start, cpu = time.perf_counter(), time.process_time()
    for line in lines:
        renderer.line(line)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    renderer.close()
    return len(lines) / elapsed, len(lines) / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lines = make_lines(args.lines)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {len(lines):,} lines per run")
    for live in (False, True):
        results = [run(lines, live) for _ in range(args.repeat)]
        wall, cpu = sorted(r[0] for r in results), sorted(r[1] for r in results)
        print(f"{'live' if live else 'plain'} mode: {wall[-1]:,.0f} lines/s wall, {cpu[-1]:,.0f} lines per CPU second "
              f"(best of {args.repeat}; medians {wall[len(wall) // 2]:,.0f} / {cpu[len(cpu) // 2]:,.0f})")


if __name__ == "__main__":
    main()
