"""Benchmark: hang detection latency, and what the progress signal costs a training step (docs/hangs.md).

* latency: one `kubetrain run` of the fault-tolerance job (tests/runtime/jobs/ft_task.py, 2 nodes x 1
  process, gloo) with `spec.hang: {policy: restart, maxRestarts: DRILLS-1, timeoutSeconds: T}`. Each drill
  waits for training to run, SIGSTOPs rank 1 and times until `kubetrain run` prints its `hung since` verdict;
  the restart (from the last checkpoint) starts the next drill. Target: latency <= T + 30 s.
* stalls: one `kubetrain run` of the same job with policy observe. Each drill: SIGSTOP rank 1 until the hang
  is reported (a stall), SIGCONT, 20 more steps, SIGSTOP again: the second hang's detection latency, and
  the training threshold just before each stall under the old rule (max(timeoutSeconds, stepFactor x the
  records' p99 step time)) and the new one (kubetrain.observe.hang: stalls left out), both judged on the
  same records at the same instant (interleaved by construction); also the eval and checkpoint thresholds
  (old: max(phaseTimeoutSeconds, stepFactor x the longest run); new: from the recent runs, stalls left out).
  Target: every detection <= threshold + 30 s.
* phases: the same job with slow evals (FT_EVAL_SLEEP); each drill makes rank 1 stop itself inside an eval
  (FT_EVAL_STOP_FLAG) while rank 0 evaluates, and times until the verdict; the eval threshold under the old
  rule (max(phaseTimeoutSeconds, stepFactor x the longest eval)) and the new one on the same records.
* overhead: the Trainer API in one process (world of 1, gloo, CPU, one thread) on bench_runtime's MLP,
  with and without KUBETRAIN_PROGRESS_DIR, A/B interleaved for --rounds rounds; and the per-step cost of the
  Heartbeat calls alone (the calls the loop makes per micro-step), timed in a tight loop. Target: < 1 %.
  Also the writer thread's record (size, time to write) and the judge's time per read of 8 full records.

    python benchmarks/bench_hang.py latency --drills 10 --timeout 10
    python benchmarks/bench_hang.py stalls --drills 5 --timeout 10
    python benchmarks/bench_hang.py phases --drills 3 --timeout 10
    python benchmarks/bench_hang.py overhead --rounds 6 --steps 300

* requests: what answering stacks requests costs the writer thread (one tick without a request: the stat of
  the stacks and flight-recorder request files, every REQUEST_SECONDS), a pure-Python loop's rate in the main
  thread with the writer looking every 0.2 s vs every 2 s (the record's cadence, as before), A/B interleaved
  for --rounds rounds; and the time from a request to a rank's complete answer (a real rank process, no torch),
  interleaved with the time from SIGUSR2 to faulthandler's dump, --drills each.

* resumes: the crash that stacks on request avoid. Two real rank processes (no torch), each SIGSTOPped for
  50-300 ms and resumed, --cycles times, interleaved: one is then sent SIGUSR2 at once (what the probe did to
  a rank that had just resumed), the other asked through a stacks request (probe.ask_stacks); a rank that
  dies is counted with its signal and started again.

    python benchmarks/bench_hang.py requests --rounds 10 --drills 20
    python benchmarks/bench_hang.py resumes --cycles 150

Not a test: numbers depend on the machine. torch is needed (not by `requests`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "tests" / "runtime" / "jobs"
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))


# --- latency ------------------------------------------------------------------------------------------------
def _spec(directory: Path, drills: int, timeout: int, policy: str = "restart") -> Path:
    spec = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "drill"}, "spec": {
        "image": "example.com/bench:1", "nodes": 2, "procsPerNode": 1, "code": {"path": str(JOBS)},
        "volumes": [{"name": "ckpt", "claim": "ckpt", "mountPath": "/ckpt", "localPath": str(directory / "ckpt")}],
        "env": {"OMP_NUM_THREADS": "1"}, "checkpoint": {"dir": "/ckpt/drill", "everySteps": 20},
        "hang": {"timeoutSeconds": timeout, "policy": policy, "maxRestarts": max(0, drills - 1)},
        "train": {"model": "ft_task:build_model", "dataset": "ft_task:build_datasets", "epochs": 100_000,
                  "batchSize": 16, "lr": 0.05, "seed": 7, "logEvery": 2}}}
    path = directory / "kubetrain.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _rank_pid(marker: str, rank: int) -> int | None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if f"BENCH_MARKER={marker}".encode() in environ and f"RANK={rank}".encode() in environ \
                and b"kubetrain.runtime.launch" not in cmdline and b"torch.distributed.run" not in cmdline:
            return int(entry)
    return None


def _pump(stream: Any, name: str, lines: queue.Queue[tuple[float, str, str]]) -> None:
    for line in iter(stream.readline, ""):
        lines.put((time.monotonic(), name, line.rstrip("\n")))


def _next(lines: queue.Queue[tuple[float, str, str]], want: Any, limit: float) -> tuple[float, str]:
    deadline = time.monotonic() + limit
    while True:
        at, name, line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if want(name, line):
            return at, line


def _start(tmp: Path, marker: str, drills: int, timeout: int, policy: str = "restart", **extra: str
           ) -> tuple[subprocess.Popen[str], queue.Queue[tuple[float, str, str]]]:
    spec = _spec(tmp, drills, timeout, policy)
    env = {**os.environ, "BENCH_MARKER": marker, "FT_SLEEP": "0.001", "PYTHONUNBUFFERED": "1", **extra}
    proc = subprocess.Popen([sys.executable, "-m", "kubetrain", "run", "--raw", "-f", str(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: queue.Queue[tuple[float, str, str]] = queue.Queue()
    for stream, name in ((proc.stdout, "out"), (proc.stderr, "err")):
        threading.Thread(target=_pump, args=(stream, name, lines), daemon=True).start()
    return proc, lines


def latency(drills: int, timeout: int) -> list[float]:
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp:
        proc, lines = _start(Path(tmp), marker, drills, timeout)
        results = []
        try:
            for drill in range(drills):
                _next(lines, lambda n, text: n == "out" and '"kind":"train"' in text, 300)
                pid = _rank_pid(marker, 1)
                assert pid is not None, "no rank 1"
                os.kill(pid, signal.SIGSTOP)
                stopped = time.monotonic()
                found, verdict = _next(lines, lambda n, text: n == "err" and "hung since" in text, timeout + 300)
                results.append(found - stopped)
                print(f"drill {drill + 1}: detected after {found - stopped:.1f} s: {verdict[:160]}", flush=True)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return results


# --- stalls -------------------------------------------------------------------------------------------------
def _progress_dir(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return Path(next(e for e in environ if e.startswith(b"KUBETRAIN_PROGRESS_DIR=")).split(b"=", 1)[1].decode())


def _thresholds(directory: Path, timeout: int) -> dict[str, tuple[float, float]]:
    """(old rule, new rule) for training, eval and checkpoint, on the same records."""
    from kubetrain.local.hangwatch import read_ranks
    from kubetrain.observe.hang import Thresholds, phase_limit, training_limit

    ranks = read_ranks(directory)
    limits = Thresholds(timeout=float(timeout))
    p99 = max((r.step_p99 or 0.0 for r in ranks), default=0.0)
    found = {"train": (max(limits.timeout, limits.step_factor * p99), training_limit(ranks, limits))}
    for phase in ("eval", "checkpoint"):
        longest = max((r.phase_max.get(phase, 0.0) for r in ranks), default=0.0)
        found[phase] = (max(limits.phase_timeout, limits.step_factor * longest), phase_limit(ranks, phase, limits))
    return found


def _train_steps(lines: queue.Queue[tuple[float, str, str]], directory: Path, count: int) -> None:
    """Wait until every rank's record shows `count` more steps than now (lines queued earlier are old)."""
    from kubetrain.local.hangwatch import read_ranks

    target = max((r.step for r in read_ranks(directory)), default=0) + count
    deadline = time.monotonic() + 300
    while min((r.step for r in read_ranks(directory)), default=0) < target:
        assert time.monotonic() < deadline, f"no step {target}"
        time.sleep(0.2)
    with contextlib.suppress(queue.Empty):
        while True:
            lines.get_nowait()


def _stop_until_reported(pid: int, lines: queue.Queue[tuple[float, str, str]], timeout: int) -> tuple[float, str]:
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        found, verdict = _next(lines, lambda n, text: n == "err" and "hung since" in text, timeout + 600)
    finally:
        os.kill(pid, signal.SIGCONT)
    return found - stopped, verdict


def stalls(drills: int, timeout: int) -> list[dict[str, Any]]:
    marker = uuid.uuid4().hex
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, lines = _start(Path(tmp), marker, 1, timeout, policy="observe")
        try:
            _next(lines, lambda n, text: n == "out" and '"kind":"train"' in text, 300)
            pid = _rank_pid(marker, 1)
            assert pid is not None, "no rank 1"
            directory = _progress_dir(pid)
            _train_steps(lines, directory, 20)
            for drill in range(drills):
                before = _thresholds(directory, timeout)
                first, _ = _stop_until_reported(pid, lines, timeout)
                _train_steps(lines, directory, 20)
                after = _thresholds(directory, timeout)
                second, verdict = _stop_until_reported(pid, lines, timeout)
                _train_steps(lines, directory, 20)
                results.append({"before": before, "after": after, "first": first, "second": second})
                print(f"drill {drill + 1}: training threshold before the stall: old {before['train'][0]:.0f} s, "
                      f"new {before['train'][1]:.0f} s; after it: old {after['train'][0]:.0f} s, new "
                      f"{after['train'][1]:.0f} s; detected after {first:.1f} s, then {second:.1f} s: "
                      f"{verdict[:110]}", flush=True)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return results


def _summary(results: list[dict[str, Any]], timeout: int) -> None:
    seconds = [r["second"] for r in results]
    old_after = [r["after"]["train"][0] for r in results]
    new_after = [r["after"]["train"][1] for r in results]
    print(f"{len(results)} drills, timeoutSeconds {timeout}: second hang detected after median "
          f"{statistics.median(seconds):.1f} s, max {max(seconds):.1f} s (new rule; target <= {timeout + 30} s); "
          f"threshold after a stall: old rule median {statistics.median(old_after):.0f} s (max "
          f"{max(old_after):.0f} s), new rule median {statistics.median(new_after):.0f} s (max {max(new_after):.0f} s)")
    last = results[-1]["after"]
    for phase in ("eval", "checkpoint"):
        old, new = last[phase]
        print(f"{phase} threshold at the end (the runs' own durations): old rule {old:.0f} s, new rule {new:.1f} s")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def phases(drills: int, timeout: int, eval_sleep: float) -> list[tuple[float, float, float]]:
    """Rank 1 stops itself in an eval (tests/runtime/jobs/ft_task.py's FT_EVAL_STOP_FLAG) while rank 0
    evaluates: (old rule's eval threshold, new rule's, detection latency) per drill."""
    marker = uuid.uuid4().hex
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        flag = Path(tmp) / "eval-stop"
        proc, lines = _start(Path(tmp), marker, 1, timeout, "observe", FT_EVAL_SLEEP=str(eval_sleep),
                             FT_EVAL_STOP_FLAG=str(flag))
        try:
            _next(lines, lambda n, text: n == "out" and '"kind":"train"' in text, 300)
            pid = _rank_pid(marker, 1)
            assert pid is not None, "no rank 1"
            directory = _progress_dir(pid)
            for drill in range(drills):
                _train_steps(lines, directory, 40)  # two epochs, two evals
                old, new = _thresholds(directory, timeout)["eval"]
                flag.touch()
                while _state(pid) != "T":
                    time.sleep(0.01)
                stopped = time.monotonic()
                try:
                    found, verdict = _next(lines, lambda n, text: n == "err" and "hung since" in text, 600)
                finally:
                    os.kill(pid, signal.SIGCONT)
                results.append((old, new, found - stopped))
                print(f"drill {drill + 1}: eval threshold old rule {old:.0f} s, new rule {new:.1f} s; detected "
                      f"after {found - stopped:.1f} s: {verdict[:120]}", flush=True)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return results


# --- overhead -----------------------------------------------------------------------------------------------
def _fit(steps: int, progress_dir: str | None) -> float:
    """Seconds per optimizer step of a Trainer run of `steps` steps (after 20 warm-up steps)."""
    import torch
    from bench_runtime import BATCH, make_data, make_model

    from kubetrain.jobspec.sections import Train
    from kubetrain.runtime.trainer import Factories, Trainer

    torch.set_num_threads(1)
    if progress_dir:
        os.environ["KUBETRAIN_PROGRESS_DIR"] = progress_dir
    else:
        os.environ.pop("KUBETRAIN_PROGRESS_DIR", None)
    train = Train(model="bench:model", dataset="bench:data", epochs=1, batchSize=BATCH, logEvery=10_000)
    timings: list[float] = []

    class Timed(torch.utils.data.Dataset[Any]):
        def __init__(self) -> None:
            self.inner = make_data((steps + 20) * BATCH)

        def __len__(self) -> int:
            return len(self.inner)

        def __getitem__(self, index: int) -> Any:
            if index == 20 * BATCH:
                timings.append(time.perf_counter())
            return self.inner[index]

    with open(os.devnull, "w") as quiet:
        Trainer(train, factories=Factories(model=make_model, dataset=lambda: (Timed(), None)), stream=quiet).fit()
    return (time.perf_counter() - timings[0]) / steps


def _calls_per_step() -> float:
    """Seconds the Heartbeat calls of one micro-step take (phase data, phase train, collective, step)."""
    from kubetrain.runtime.heartbeat import Heartbeat

    progress = Heartbeat(0, 1, None)
    number = 200_000

    def one() -> None:
        progress.phase("data")
        progress.phase("train")
        progress.collective(0.001)
        progress.step(1)

    return min(timeit.repeat(one, number=number, repeat=5)) / number


def _record_and_judge() -> tuple[int, float, float]:
    """A full record's size and time to build and write (the writer thread, every 2 s), and the judge's time
    for 8 such records (what the controller and `kubetrain run` do per read)."""
    from kubetrain.observe.hang import RankView, Thresholds, assess
    from kubetrain.runtime.heartbeat import WINDOW, Heartbeat

    with tempfile.TemporaryDirectory() as directory:
        progress = Heartbeat(0, 8, directory)
        for step in range(WINDOW + 1):
            progress.collective(0.001)
            progress.step(step)
        write = min(timeit.repeat(progress.write, number=200, repeat=5)) / 200
        size = len(Path(directory, "rank-0.json").read_bytes())
    views = [RankView.parse({**progress.record(), "rank": rank}) for rank in range(8)]
    judge = min(timeit.repeat(lambda: assess(views, 8, Thresholds()), number=50, repeat=5)) / 50
    return size, write, judge


def overhead(rounds: int, steps: int) -> None:
    sides: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as directory:
        for index in range(rounds):
            order = ("off", "on") if index % 2 == 0 else ("on", "off")
            for side in order:
                sides[side].append(_fit(steps, directory if side == "on" else None))
    off, on = statistics.median(sides["off"]), statistics.median(sides["on"])
    calls = _calls_per_step()
    print(f"step time, median of {rounds} interleaved runs of {steps} steps: off {off * 1000:.2f} ms, on "
          f"{on * 1000:.2f} ms ({(on / off - 1) * 100:+.2f} %)")
    print(f"   runs off: {' '.join(f'{s * 1000:.2f}' for s in sides['off'])} ms")
    print(f"   runs on:  {' '.join(f'{s * 1000:.2f}' for s in sides['on'])} ms")
    print(f"Heartbeat calls per micro-step: {calls * 1e6:.2f} us = {calls / off * 100:.3f} % of this step")
    size, write, judge = _record_and_judge()
    print(f"record: {size:,} bytes, built and written in {write * 1e3:.2f} ms (every 2 s, the writer thread); "
          f"judging 8 such records: {judge * 1e3:.2f} ms")


# --- stacks requests ----------------------------------------------------------------------------------------
def _tick_cost() -> float:
    """Seconds of one writer tick without a pending request."""
    from kubetrain.runtime.heartbeat import Heartbeat

    with tempfile.TemporaryDirectory() as directory:
        progress = Heartbeat(0, 1, directory)
        progress.start()
        progress.stop()

        def tick() -> None:
            progress._answer_stacks_request()
            progress._answer_flight_recorder_request()

        return min(timeit.repeat(tick, number=20_000, repeat=5)) / 20_000


def _loop_rate(request_seconds: float, seconds: float = 2.0) -> float:
    """Iterations per second of a pure-Python loop in this thread while a Heartbeat's writer looks for requests
    every `request_seconds`."""
    from kubetrain.runtime import heartbeat

    with tempfile.TemporaryDirectory() as directory:
        heartbeat.REQUEST_SECONDS = request_seconds
        progress = heartbeat.Heartbeat(0, 1, directory)
        progress.start()
        count, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            count += 1
        progress.stop()
    return count / seconds


def _answer_times(drills: int) -> tuple[list[float], list[float]]:
    """Seconds from a stacks request to the complete answer, and from SIGUSR2 to the dump, interleaved, on one
    real rank process."""
    from kubetrain.observe import probe
    from kubetrain.podenv import STACKS_ANSWERED, STACKS_REQUEST, stacks_path
    from tests.observe.ranks import rank_processes

    times: dict[str, list[float]] = {"request": [], "signal": []}
    with tempfile.TemporaryDirectory() as name, rank_processes(Path(name), ["plain"]) as [rank]:
        stacks = stacks_path(name, 0)
        for index in range(drills * 2):
            side = ("request", "signal")[(index + index // 2) % 2]
            size = stacks.stat().st_size
            start = time.perf_counter()
            if side == "request":
                probe.request(Path(name), STACKS_REQUEST)
            else:
                os.kill(rank.pid, signal.SIGUSR2)
            done = STACKS_ANSWERED if side == "request" else "in <module>"
            while done not in probe.tail(stacks, size):
                time.sleep(0.001)
            times[side].append(time.perf_counter() - start)
            time.sleep(0.3)
    return times["request"], times["signal"]


def requests(rounds: int, drills: int) -> None:
    tick = _tick_cost()
    print(f"writer tick without a request (2 stats): {tick * 1e6:.1f} us; every 0.2 s = {tick * 5 * 100:.4f} % "
          "of one CPU")
    rates: dict[float, list[float]] = {0.2: [], 2.0: []}
    for index in range(rounds):
        for every in ((0.2, 2.0) if index % 2 == 0 else (2.0, 0.2)):
            rates[every].append(_loop_rate(every))
    new, old = statistics.median(rates[0.2]), statistics.median(rates[2.0])
    print(f"pure-Python loop in the main thread, median of {rounds} interleaved 2 s runs: writer every 2 s "
          f"{old / 1e6:.2f} M/s, every 0.2 s {new / 1e6:.2f} M/s ({(new / old - 1) * 100:+.2f} %)")
    print(f"   runs every 2 s:   {' '.join(f'{r / 1e6:.2f}' for r in rates[2.0])} M/s")
    print(f"   runs every 0.2 s: {' '.join(f'{r / 1e6:.2f}' for r in rates[0.2])} M/s")
    asked, signalled = _answer_times(drills)
    print(f"stacks of a rank, {drills} interleaved drills each: request -> complete answer median "
          f"{statistics.median(asked) * 1e3:.0f} ms (max {max(asked) * 1e3:.0f} ms); SIGUSR2 -> dump median "
          f"{statistics.median(signalled) * 1e3:.1f} ms (max {max(signalled) * 1e3:.1f} ms)")


def _resume(rank: subprocess.Popen[bytes], directory: Path, side: str) -> None:
    """Stop the rank, resume it, and take its stacks at once: by SIGUSR2 or by a request."""
    from kubetrain.observe import probe
    from kubetrain.observe.stacks import process_state

    os.kill(rank.pid, signal.SIGSTOP)
    while process_state(rank.pid) not in ("T", None):
        time.sleep(0.005)
    time.sleep(random.uniform(0.05, 0.3))
    os.kill(rank.pid, signal.SIGCONT)
    if side == "signal":
        os.kill(rank.pid, signal.SIGUSR2)
        time.sleep(0.1)
    else:
        probe.ask_stacks(directory, {0: rank.pid})


def resumes(cycles: int) -> None:
    from tests.observe.ranks import rank_processes

    deaths: dict[str, list[int | None]] = {"signal": [], "request": []}
    with tempfile.TemporaryDirectory() as name, contextlib.ExitStack() as stack:
        directories = {side: Path(name, side) for side in deaths}
        ranks = {}
        for side, directory in directories.items():
            directory.mkdir()
            ranks[side] = stack.enter_context(rank_processes(directory, ["plain"]))[0]
        for index in range(cycles):
            for side in (("signal", "request") if index % 2 == 0 else ("request", "signal")):
                _resume(ranks[side], directories[side], side)
                if ranks[side].poll() is not None:
                    deaths[side].append(ranks[side].returncode)
                    ranks[side] = stack.enter_context(rank_processes(directories[side], ["plain"]))[0]
    for side, codes in deaths.items():
        print(f"{side}: {len(codes)} of {cycles} resumed ranks died" + (f" (exit {codes})" if codes else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--drills", type=int, default=10)
    lat.add_argument("--timeout", type=int, default=10, help="spec.hang.timeoutSeconds")
    stall = sub.add_parser("stalls")
    stall.add_argument("--drills", type=int, default=5)
    stall.add_argument("--timeout", type=int, default=10, help="spec.hang.timeoutSeconds")
    phase = sub.add_parser("phases")
    phase.add_argument("--drills", type=int, default=3)
    phase.add_argument("--timeout", type=int, default=10, help="spec.hang.timeoutSeconds")
    phase.add_argument("--eval-sleep", type=float, default=0.05, help="seconds per eval sample (64 per rank)")
    over = sub.add_parser("overhead")
    over.add_argument("--rounds", type=int, default=6)
    over.add_argument("--steps", type=int, default=300)
    req = sub.add_parser("requests")
    req.add_argument("--rounds", type=int, default=10)
    req.add_argument("--drills", type=int, default=20)
    res = sub.add_parser("resumes")
    res.add_argument("--cycles", type=int, default=150)
    args = parser.parse_args()
    if args.what == "latency":
        results = latency(args.drills, args.timeout)
        print(f"{len(results)} drills, threshold {args.timeout} s: detection latency median "
              f"{statistics.median(results):.1f} s, max {max(results):.1f} s (target <= {args.timeout + 30} s)")
    elif args.what == "stalls":
        _summary(stalls(args.drills, args.timeout), args.timeout)
    elif args.what == "phases":
        found = phases(args.drills, args.timeout, args.eval_sleep)
        print(f"{len(found)} drills, rank 1 stopped in an eval: detected after median "
              f"{statistics.median(f[2] for f in found):.1f} s, max {max(f[2] for f in found):.1f} s; eval threshold "
              f"new rule median {statistics.median(f[1] for f in found):.1f} s (old rule "
              f"{statistics.median(f[0] for f in found):.0f} s)")
    elif args.what == "requests":
        requests(args.rounds, args.drills)
    elif args.what == "resumes":
        resumes(args.cycles)
    else:
        overhead(args.rounds, args.steps)


if __name__ == "__main__":
    main()
