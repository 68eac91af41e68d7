"""The heartbeat's writer thread answers stacks requests in a real rank process (no torch): every thread's stack
from faulthandler, called with the GIL held, between marker lines naming the request; no signal involved."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path

from kubetrain import podenv
from kubetrain.observe import probe
from kubetrain.observe.stacks import parse_dump
from tests.observe.ranks import pending_signals, rank_processes
from tests.testenv.polling import wait_for


def test_the_writer_thread_answers_each_stacks_request_with_every_threads_stack(tmp_path: Path) -> None:
    stacks = podenv.stacks_path(tmp_path, 0)

    def answers(count: int) -> str | None:
        text = stacks.read_text()
        return text if text.count(podenv.STACKS_ANSWERED) == count else None

    with rank_processes(tmp_path, ["answering"]) as [rank]:
        for asked in (1, 2):
            probe.request(tmp_path, podenv.STACKS_REQUEST)
            request = (tmp_path / podenv.STACKS_REQUEST).stat().st_mtime_ns
            text = wait_for(partial(answers, asked), f"answer {asked}", 10, 0.05)
            answer = probe.last_answer(text)
            lines = answer.splitlines()
            assert (lines[0], lines[-1]) == (f"{podenv.STACKS_ANSWER}{request}", f"{podenv.STACKS_ANSWERED}{request}")
            frames, threads = parse_dump(answer)
            assert frames[0].startswith("waiting_in_all_reduce (<string>:") and threads == 2, answer
            assert "Current thread" in answer  # the dump ran in the writer thread
        assert signal.SIGUSR2 not in pending_signals(rank.pid)
