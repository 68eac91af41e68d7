"""Where a command's CPU goes on this machine, by kind of process: run it, sample /proc, print a table.

    python3 benchmarks/cpu_by_process.py [--interval 0.5] [--json FILE] -- env CI=true bash .ci/run

Every `--interval` seconds each process's CPU (user + system, all its threads) is read from /proc/PID/stat and
kept under a kind taken from its command line (a torch rank, torchrun's agent, an API server, ...; the
rendezvous store by its process name). Processes started before the command are left out, and the whole
machine is sampled: pods and containers count, and so does anything else running beside the command. A process
that lives shorter than one interval, or the CPU it spends in its last interval, is missed: the table
undercounts many short processes. The command's exit status is this script's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubetrain.podenv import STORE_PROCESS_NAME  # the comm of a local run's store process

TICK = os.sysconf("SC_CLK_TCK")
# The first match in the command line wins: the more specific names come first.
KINDS = (
    ("kubetrain.runtime.launch", "torchrun agent"),
    ("torch.distributed.run", "torchrun agent"),
    ("bin/torchrun", "torchrun agent"),
    ("kubetrain.runtime", "rank"),
    ("xdist", "pytest worker"),
    ("-m pytest", "pytest"),
    ("mlflow", "mlflow"),
    ("tensorboard", "tensorboard"),
    ("kube-apiserver", "kube-apiserver"),
    ("etcd", "etcd"),
    ("kube-controller-manager", "kube-controller-manager"),
    ("kube-scheduler", "kube-scheduler"),
    ("containerd-shim", "containerd-shim"),
    ("containerd", "containerd"),
    ("kubelet", "kubelet"),
)


def kind_of(argv: str, comm: str = "") -> str:
    if comm == STORE_PROCESS_NAME:
        return "rendezvous store"
    for needle, kind in KINDS:
        if needle in argv:
            return kind
    return Path(argv.split(" ", 1)[0]).name[:40] or "?"


Key = tuple[int, str]  # (pid, start time in ticks): a reused PID is another process


def processes() -> Iterator[tuple[str, Key, list[str]]]:
    """(its /proc directory, its key, the fields of /proc/PID/stat after the command name) of each process."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
                yield entry.path, (int(entry.name), fields[19]), fields
            except (OSError, IndexError):
                continue  # gone between listing and reading


def sample(seen: dict[Key, tuple[str, float]], before: set[Key]) -> None:
    """Update seen[key] = (kind, CPU seconds so far) for every process not in `before`."""
    for path, key, fields in processes():
        try:
            if key in before:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            if key not in seen:
                argv = Path(path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if not argv:
                    continue  # a kernel thread, or a process already gone
                seen[key] = (kind_of(argv, Path(path, "comm").read_text().strip()), cpu)
            seen[key] = (seen[key][0], cpu)
        except (OSError, IndexError, ValueError):
            continue  # gone between listing and reading


def running() -> set[Key]:
    return {key for _, key, _ in processes()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--json", type=Path, help="also write {kind: [CPU seconds, processes]} here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    before = running()
    seen: dict[Key, tuple[str, float]] = {}
    began = time.monotonic()
    child = subprocess.Popen(command)
    while child.poll() is None:
        sample(seen, before)
        time.sleep(args.interval)
    sample(seen, before)
    totals: dict[str, list[float]] = {}
    for kind, cpu in seen.values():
        row = totals.setdefault(kind, [0.0, 0])
        row[0] += cpu
        row[1] += 1
    wall = time.monotonic() - began
    print(f"{wall:.0f} s wall, {sum(r[0] for r in totals.values()):.0f} CPU-s sampled", file=sys.stderr)
    for kind, (cpu, count) in sorted(totals.items(), key=lambda item: -item[1][0])[:25]:
        print(f"{cpu:9.1f} CPU-s {int(count):6d} processes  {kind}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(totals, indent=1))
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
