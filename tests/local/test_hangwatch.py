"""`kubetrain run`'s hang watch asks real rank processes (no torch) for their stacks: the writer thread of a rank
that can run answers, and only a rank whose writer cannot run (the GIL held in C) is sent SIGUSR2."""

from __future__ import annotations

import io
import signal
from pathlib import Path

import pytest

from kubetrain.local import hangwatch
from kubetrain.local.hangwatch import LocalHangWatch, read_ranks
from kubetrain.local.paths import PathMap
from kubetrain.local.plan import RunPlan
from kubetrain.observe.hang import Assessment, Thresholds
from kubetrain.observe.stacks import collect, render
from kubetrain.podenv import RUN_ID_ENV, STACKS_ANSWER, stacks_path
from tests.observe.ranks import pending_signals, rank_processes


def plan(run_id: str, directory: Path) -> RunPlan:
    return RunPlan("job", run_id, [], 2, directory, PathMap(()), False, frozenset(), 5.0, {}, [], "trainer", "")


def test_the_hang_watch_signals_only_the_rank_whose_writer_cannot_run(tmp_path: Path) -> None:
    run_id = f"hangwatch-{tmp_path.name}"
    watch = LocalHangWatch(plan(run_id, tmp_path), tmp_path, Thresholds(), "observe", io.StringIO())
    with rank_processes(tmp_path, ["answering", "gil"], {RUN_ID_ENV: run_id}) as (answering, _):
        ranks = read_ranks(tmp_path)
        dumps, states, _ = watch.ask(ranks)
        assert signal.SIGUSR2 not in pending_signals(answering.pid)
        assert dumps[0].startswith(STACKS_ANSWER) and STACKS_ANSWER not in stacks_path(tmp_path, 1).read_text()
        lines = render(collect(ranks, dumps, states))
        assert "    waiting_in_all_reduce (<string>:" in "\n".join(lines) and len(lines) == 6, lines
        assert "    holding_the_gil (<string>:" in "\n".join(lines), lines


def test_a_hang_is_reported_once_until_some_rank_progresses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that finds no hang between two that find the same one (no rank progressed: the same `since`)
    must not make the watch report it again; progress, then a new stall, is a new hang."""
    verdicts = iter([Assessment(True, 100.0, 7, 4.0, "train"), Assessment(False, 100.0, 7, 60.0, "eval"),
                     Assessment(True, 100.0, 7, 4.0, "train"), Assessment(False, 130.0, 9, 4.0, "train"),
                     Assessment(True, 130.0, 9, 4.0, "train")])
    monkeypatch.setattr(hangwatch, "assess", lambda *args, **kwargs: next(verdicts))
    watch = LocalHangWatch(plan("once", tmp_path), tmp_path, Thresholds(), "observe", io.StringIO())
    reported: list[float | None] = []
    monkeypatch.setattr(watch, "_report", lambda assessment: reported.append(assessment.since))
    for _ in range(5):
        watch.next_check = 0.0
        assert watch.check() is False  # policy observe never stops the job
    assert reported == [100.0, 130.0]
    assert watch.hangs == 2
