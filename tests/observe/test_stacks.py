"""Stacks on SIGUSR2 from a real process (kubetrain.runtime.heartbeat), /proc states, grouping and the verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kubetrain.observe.hang import Assessment, RankView
from kubetrain.observe.stacks import (
    RankStack,
    collect,
    flight_recorder_summary,
    group,
    parse_dump,
    process_state,
    render,
    verdict,
)
from kubetrain.podenv import record_path, stacks_path
from tests.testenv.polling import wait_for

WORKER = textwrap.dedent("""
    import sys, time
    from kubetrain.runtime.heartbeat import Heartbeat

    def waiting_in_a_collective():
        print("ready", flush=True)
        while True:
            time.sleep(0.05)

    progress = Heartbeat(3, 4, sys.argv[1])
    progress.start()
    progress.step(1)
    waiting_in_a_collective()
""")


def rank(number: int, node: int = 1, pid: int = 100) -> RankView:
    return RankView(number, node, "", pid, 7, "train", 0.0, 0.0, 0.0)


def test_a_real_process_dumps_its_stacks_on_sigusr2_and_reports_stopped_in_proc(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        record = json.loads(record_path(tmp_path, 3).read_text())
        assert record["rank"] == 3 and record["pid"] == proc.pid and record["step"] == 1
        os.kill(proc.pid, signal.SIGUSR2)
        dump = wait_for(lambda: text if "in <module>" in (text := stacks_path(tmp_path, 3).read_text()) else None,
                        "the stack dump", 10, 0.05)
        frames, threads = parse_dump(dump)
        assert frames[0].startswith("waiting_in_a_collective (<string>:"), dump
        assert frames[-1].startswith("<module> (<string>:") and threads == 2  # + the progress writer
        assert process_state(proc.pid) in ("S", "R")
        os.kill(proc.pid, signal.SIGSTOP)
        wait_for(lambda: process_state(proc.pid) == "T", "state T", 10, 0.05)
        size = stacks_path(tmp_path, 3).stat().st_size
        os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(0.3)
        assert stacks_path(tmp_path, 3).stat().st_size == size  # a stopped process cannot answer
        view = RankView.parse(record)
        [stack] = collect([view], {3: ""}, {3: process_state(proc.pid)})
        assert render([stack]) == [f"--- rank 3 (node 1, {os.uname().nodename}) stopped (SIGSTOP?), pid {proc.pid}, "
                                   "state T: no stack (a stopped or uninterruptible process cannot run its signal "
                                   "handler)"]
        os.kill(proc.pid, signal.SIGCONT)  # the pending SIGUSR2 is delivered now
        wait_for(lambda: stacks_path(tmp_path, 3).stat().st_size > size, "the late dump", 10, 0.05)
    finally:
        proc.kill()
        proc.wait()
    assert process_state(proc.pid) is None


def test_identical_stacks_are_grouped_and_the_outlier_comes_first() -> None:
    common = ("wait (distributed_c10d.py:4200)", "_micro_step (loop.py:180)")
    odd = ("__next__ (dataloader.py:700)", "_batches (loop.py:133)")
    stacks = [RankStack(rank(r, node=r // 2 + 1), odd if r == 2 else common, 3) for r in range(4)]
    grouped = group(stacks)
    assert [[s.rank.rank for s in members] for _, members in grouped] == [[2], [0, 1, 3]]
    lines = render(stacks)
    assert lines[0] == "--- OUTLIER rank 2 (node 2): training thread, innermost first (3 threads)"
    assert lines[3] == "--- ranks 0,1,3 (node 1,2): training thread, innermost first (3 threads)"
    assessment = Assessment(True, time.mktime((2026, 1, 2, 14, 2, 11, 0, 0, -1)), 1234, 300.0, "train")
    line = verdict(assessment, stacks)
    assert line == ("hung since 14:02:11 at step 1,234 (no progress for over 300 s, phase train): 1 rank waits in "
                    "__next__ (dataloader.py:700); 3 ranks wait in wait (distributed_c10d.py:4200)")


def test_the_verdict_names_a_process_that_cannot_answer_with_its_state() -> None:
    stacks = [RankStack(rank(0), ("wait (x.py:1)",), 2), RankStack(rank(1, node=2, pid=77), state="D"),
              RankStack(rank(2, node=2, pid=78), state=None)]
    line = verdict(Assessment(True, 0.0, 9, 5.0, "train"), stacks)
    assert ": rank 1 (node 2) in uninterruptible sleep (D), pid 77, state D; rank 2 (node 2) is gone (pid 78); " \
           "1 rank waits in wait (x.py:1)" in line


def test_the_flight_recorder_names_the_rank_missing_from_a_collective() -> None:
    def entries(*seqs: int, state: str = "scheduled") -> dict[str, object]:
        return {"entries": [{"collective_seq_id": s, "profiling_name": "gloo:all_reduce", "state": state,
                             "is_p2p": False} for s in seqs]}

    summary = flight_recorder_summary({0: entries(3, 4), 2: entries(3, 4), 3: entries(2, 3)}, 4)
    assert summary == "flight recorder: ranks 0,2 in gloo:all_reduce #4; ranks 1,3 never entered it"
    assert flight_recorder_summary({}, 2) is None
    done = flight_recorder_summary({0: entries(5, state="completed"), 1: entries(5, state="completed")}, 2)
    assert done == "flight recorder: newest collective gloo:all_reduce #5 completed"
