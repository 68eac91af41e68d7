"""The stacks probe on real rank processes: a rank whose writer thread answers the stacks request is never sent
SIGUSR2 (faulthandler's signal handler reads the other threads' frames without the GIL, which can crash a rank
while another of its threads runs Python); a rank whose writer cannot run (the GIL held in C) still gets its
stack through SIGUSR2."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from kubetrain import podenv
from kubetrain.observe import probe
from kubetrain.observe.stacks import parse_dump
from tests.observe.ranks import pending_signals, rank_processes


def test_only_the_rank_whose_writer_cannot_run_is_signalled(tmp_path: Path) -> None:
    with rank_processes(tmp_path, ["answering", "gil"]) as (answering, holding):
        answer = probe.probe(tmp_path)
        assert signal.SIGUSR2 not in pending_signals(answering.pid)
        assert answer["dumps"]["0"].startswith(podenv.STACKS_ANSWER)
        frames, threads = parse_dump(answer["dumps"]["0"])
        assert frames[0].startswith("waiting_in_all_reduce (<string>:") and threads == 2, answer["dumps"]["0"]
        frames, threads = parse_dump(answer["dumps"]["1"])
        assert frames[0].startswith("holding_the_gil (<string>:") and threads == 2, answer["dumps"]["1"]
        assert podenv.STACKS_ANSWER not in podenv.stacks_path(tmp_path, 1).read_text()  # SIGUSR2's dump
        assert holding.poll() is None


def test_ranks_without_a_flight_recorder_answer_so_the_probe_does_not_wait_for_its_deadline(tmp_path: Path) -> None:
    """A rank with no process group (a plain script, or one not started yet) has no flight recorder to dump: it
    answers the request with no entries, and the probe stops waiting once every rank answered."""
    with rank_processes(tmp_path, ["answering", "answering"]):
        started = time.monotonic()
        answer = probe.probe(tmp_path, answer_seconds=30)
        waited = time.monotonic() - started
    assert waited < 15, f"the probe waited {waited:.1f} s: for flight records no rank will write"
    assert all(answer["dumps"][rank].startswith(podenv.STACKS_ANSWER) for rank in ("0", "1"))
    assert answer["flight"] == {}
    assert podenv.flight_record_path(tmp_path, 1).read_bytes() == podenv.FR_NONE


SLOW_DUMP = """
import os, signal, sys, time

def dump(signum, frame):  # faulthandler writes a dump in many small writes, with no end marker
    with open(sys.argv[1], "a") as out:
        out.write('Current thread 0x1 (most recent call first):\\n  File "<string>", line 8 in inner\\n')
        out.flush()
        until = time.monotonic() + 0.4  # a dump the scheduler interrupts: the rank keeps running, nothing written
        while time.monotonic() < until:
            pass
        out.write('  File "<string>", line 20 in <module>\\n')

signal.signal(signal.SIGUSR2, dump)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_dump_the_scheduler_interrupts_is_read_whole(tmp_path: Path) -> None:
    """A rank that does not answer the request gets SIGUSR2, and its dump is read only once the rank has gone back
    to sleep: not its first frames while its handler still writes."""
    stacks = podenv.stacks_path(tmp_path, 0)
    with subprocess.Popen([sys.executable, "-c", SLOW_DUMP, str(stacks)], stdout=subprocess.PIPE) as rank:
        try:
            assert rank.stdout is not None and rank.stdout.readline() == b"ready\n"
            dumps = probe.ask_stacks(tmp_path, {0: rank.pid}, answer_seconds=0.2)
        finally:
            rank.kill()
    frames, threads = parse_dump(dumps[0])
    assert frames == ("inner (<string>:8)", "<module> (<string>:20)") and threads == 1, dumps[0]
