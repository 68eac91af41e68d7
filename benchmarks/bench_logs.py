"""Throughput of the logs path: lines/s through line assembly, timestamp parsing, dedup, prefixing and merging.

    .venv/bin/python benchmarks/bench_logs.py [--replicas 8] [--lines 50000] [--runs 5] [--from DIR] [--record DIR]

Streams are what the API server sends for `timestamps=true` (RFC3339Nano prefix, as the kubelet writes it):
recorded ones from --from DIR (one `kubectl logs --timestamps POD > DIR/<replica>.log` per replica), or
synthetic ones (training chatter plus a KUBETRAIN_METRICS line every 20 lines) that --record DIR saves.
No cluster: this measures kubetrain's own per-line cost, i.e. how fast a terminal or pipe can be fed.

* merge:  `kubetrain logs` without -f: 64 KiB chunks → lines → heap-merge by time → prefix (plain and colour).
* follow: `kubetrain logs -f`: per line timestamp → dedup → prefix → locked sink → the progress renderer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubetrain.jobs.logmerge import Dedup, LineAssembler, Prefixer, merge, split_timestamp  # noqa: E402
from kubetrain.jobs.logs import LogOptions, _Output  # noqa: E402
from kubetrain.metrics import format_metrics  # noqa: E402
from kubetrain.observe.render import Renderer  # noqa: E402

CHUNK = 65536


def synthetic(replica: int, lines: int) -> bytes:
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=replica * 137)
    out = []
    for i in range(lines):
        stamp = (start + dt.timedelta(microseconds=i * 1500)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
        if i % 20 == 0:
            text = format_metrics("train", step=i, total_steps=lines, epoch=1, loss=0.5, samples_per_s=1234.5,
                                  lr=3e-4, gpu_mem_mb=12000.0, time=1767225600 + i / 100, rank=replica)
        else:
            text = f"rank {replica}: iteration {i} | data 0.0123s | fwd 0.0456s | bwd 0.0789s | nccl allreduce ok"
        out.append(f"{stamp} {text}\n")
    return "".join(out).encode()


def streams(args: argparse.Namespace) -> dict[str, bytes]:
    if args.source:
        return {p.stem: p.read_bytes() for p in sorted(Path(args.source).glob("*.log"))}
    recorded = {("master-0" if i == 0 else f"worker-{i - 1}"): synthetic(i, args.lines) for i in range(args.replicas)}
    if args.record:
        Path(args.record).mkdir(parents=True, exist_ok=True)
        for label, data in recorded.items():
            (Path(args.record) / f"{label}.log").write_bytes(data)
    return recorded


def chunked_lines(data: bytes) -> Iterator[str]:
    assembler = LineAssembler()
    for start in range(0, len(data), CHUNK):
        yield from assembler.feed(data[start:start + CHUNK])
    yield from assembler.flush()


def run_merge(recorded: dict[str, bytes], color: bool) -> int:
    count = 0
    for _line in merge([(label, chunked_lines(data)) for label, data in recorded.items()], Prefixer(color)):
        count += 1
    return count


def run_follow(recorded: dict[str, bytes], color: bool) -> int:
    renderer = Renderer(io.StringIO(), io.StringIO(), live=False)  # what `logs -f` hands each line to
    output = _Output(renderer.line, LogOptions(color=color))
    for label, data in recorded.items():
        dedup = Dedup()
        for line in chunked_lines(data):
            key, stamp, text = split_timestamp(line)
            if dedup.accept(key):
                output.emit(label, stamp, text)
    return output.lines


def measure(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    rates, count = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        count = fn()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--lines", type=int, default=50_000, help="lines per replica (synthetic streams)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--from", dest="source", default=None, help="directory of recorded <replica>.log files")
    parser.add_argument("--record", default=None, help="save the synthetic streams here")
    args = parser.parse_args()
    recorded = streams(args)
    total_mb = sum(len(d) for d in recorded.values()) / 2**20
    print(f"{len(recorded)} streams, {total_mb:.1f} MiB, python {sys.version.split()[0]}")
    for name, fn in (("merge", run_merge), ("follow", run_follow)):
        for color in (False, True):
            rate, count = measure(lambda fn=fn, color=color: fn(recorded, color), args.runs)
            print(f"{name:<7} {'colour' if color else 'plain':<7} {count:>9,} lines  {rate:>12,.0f} lines/s")


if __name__ == "__main__":
    main()
