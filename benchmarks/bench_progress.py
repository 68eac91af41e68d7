"""Benchmark: metrics lines per second through the progress renderer (kubetrain.observe.render).

Feeds N realistic lines (KUBETRAIN_METRICS train records, prefixed as `kubetrain run` prefixes them, with
one user line and one eval record per 100) through `Renderer.line`, in the plain mode (stderr not a
terminal: a progress line at most every 10 s) and the live mode (rich redraws at most every 0.1 s, into
a throw-away terminal), each with every line parsed (the renderer's sampling of floods turned off: the
cost of a line), and the live mode as shipped (past 10k train lines/s the rest are sampled). stdout and
stderr go to io.StringIO. Reports the best of --repeat runs, as lines per wall second and per CPU second
of this process (the wall rate is what a loaded machine leaves it).

"Without slowing the job": a writer process prints --pipe-lines metrics lines as fast as it can, one write
per line as the runtime does, into a pipe read the way `kubetrain run` reads its nodes (readline, decode,
prefix) and either thrown away or fed to the renderer, alternately, --repeat times. The writer's own rate
(its clock) is compared, and how often it found the pipe full (a non-blocking write refused): the renderer
holds the job back only then; otherwise a slower writer lost CPU to the reader on an over-subscribed machine.

    .venv/bin/python benchmarks/bench_progress.py [--lines 200000] [--pipe-lines 200000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time

from kubetrain.metrics import format_metrics
from kubetrain.observe import render
from kubetrain.observe.render import Renderer

DEFAULT_BUSY = render.BUSY_TRAIN


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


def run(lines: list[str], live: bool, every_line: bool = True) -> tuple[float, float]:
    """(lines per wall second, lines per CPU second of this process: what a loaded machine leaves us).
    `every_line`: sampling off (render.BUSY_TRAIN unbounded), every train line parsed."""
    render.BUSY_TRAIN = 1 << 62 if every_line else DEFAULT_BUSY
    out, err = io.StringIO(), io.StringIO()
    renderer = Renderer(out, err, live=live)
    start, cpu = time.perf_counter(), time.process_time()
    for line in lines:
        renderer.line(line)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    renderer.close()
    return len(lines) / elapsed, len(lines) / cpu


WRITER = r"""
import os, select, sys, time
from kubetrain.metrics import format_metrics
count = int(sys.argv[1])
lines = [(format_metrics("train", rank=0, step=s, total_steps=count, epoch=1, loss=1.0 / s, samples_per_s=7242.25,
                         lr=0.00286) + "\n").encode() for s in range(1, count + 1)]
fd = sys.stdout.fileno()
os.set_blocking(fd, False)  # a full pipe shows as BlockingIOError: counted, then waited for as a blocking write would
full = 0
began = time.perf_counter()
for line in lines:  # one write per line, as the runtime's metrics lines
    while line:
        try:
            line = line[os.write(fd, line):]
        except BlockingIOError:
            full += 1
            select.select([], [fd], [])
print(f"WROTE {count / (time.perf_counter() - began):.0f} {full}", file=sys.stderr, flush=True)
"""


def pipe_run(count: int, rendered: bool) -> tuple[float, int]:
    """(the writer's lines per second, how often it found the pipe full) while its pipe is read and rendered
    (or only read)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(count)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    render.BUSY_TRAIN = DEFAULT_BUSY
    renderer = Renderer(io.StringIO(), io.StringIO(), live=False)
    for raw in iter(proc.stdout.readline, b""):
        text = "[node-1 rank-0] " + raw.decode("utf-8", "replace").rstrip("\r\n")  # as the Supervisor's pump
        if rendered:
            renderer.line(text)
    renderer.close()
    err = proc.stderr.read().decode()
    proc.wait()
    _, rate, full = next(line for line in err.splitlines() if line.startswith("WROTE ")).split()
    return float(rate), int(full)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pipe-lines", type=int, default=200_000, help="0: skip the pipe measurement")
    args = parser.parse_args()
    lines = make_lines(args.lines)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {len(lines):,} lines per run")
    modes = [("plain, every line parsed", False, True), ("live, every line parsed", True, True),
             ("live, as shipped (a flood is sampled)", True, False)]
    for name, live, every_line in modes:
        results = [run(lines, live, every_line) for _ in range(args.repeat)]
        wall, cpu = sorted(r[0] for r in results), sorted(r[1] for r in results)
        print(f"{name}: {wall[-1]:,.0f} lines/s wall, {cpu[-1]:,.0f} lines per CPU second "
              f"(best of {args.repeat}; medians {wall[len(wall) // 2]:,.0f} / {cpu[len(cpu) // 2]:,.0f})")
    if args.pipe_lines:
        rates: dict[bool, list[tuple[float, int]]] = {False: [], True: []}
        for index in range(args.repeat):
            for rendered in ((False, True) if index % 2 == 0 else (True, False)):
                rates[rendered].append(pipe_run(args.pipe_lines, rendered))
        for rendered, name in ((False, "only read"), (True, "rendered")):
            runs = rates[rendered]
            print(f"writer into a pipe that is {name} ({args.pipe_lines:,} metrics lines, one write each): "
                  f"median {statistics.median(r for r, _ in runs):,.0f} lines/s; pipe found full "
                  f"{', '.join(str(f) for _, f in runs)} time(s) in the {args.repeat} runs")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
