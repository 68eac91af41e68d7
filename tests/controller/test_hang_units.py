"""The controller's hang verdicts as conditions and Events (kubetrain/controller/hangs.py), from probe answers
shaped like kubetrain.observe.probe's output."""

from __future__ import annotations

from typing import Any

from kubetrain.controller.hangs import ClusterHangWatch, Verdict, carried, transitions, verdict_of
from kubetrain.controller.mirror import condition
from kubetrain.jobs.pods import Replica
from kubetrain.jobs.stacks import PodAnswer, combine
from kubetrain.observe.hang import Thresholds

NOW = 1_000_000.0


def record(rank: int, step_at: float, written_at: float, own: float = 0.001) -> dict[str, Any]:
    return {"rank": rank, "world_size": 2, "node": 1, "pid": 100 + rank, "step": 50, "phase": "train",
            "phase_since": NOW - 600, "step_at": step_at, "written_at": written_at, "step_p99": 0.05,
            "steps_timed": 40, "own_p50": own, "own_timed": 40}


def answer(records: list[dict[str, Any]], states: dict[str, str | None]) -> PodAnswer:
    replica = Replica("master-0", "master", 0, "job-master-0", "uid", "pytorch", "Running", "node-a", 0, "running",
                      "", None, 0)
    return PodAnswer(replica, {"now": NOW, "hang": None, "records": records, "dumps": {}, "states": states,
                               "flight": {}})


def test_a_stopped_rank_is_hung_with_the_one_line_verdict() -> None:
    pods = [answer([record(0, NOW - 40, NOW - 1), record(1, NOW - 40, NOW - 40)], {"0": "S", "1": "T"})]
    verdict = verdict_of(combine("job", pods, asked=False, thresholds=Thresholds(timeout=30)))
    assert verdict is not None and verdict.hung
    assert verdict.message.endswith("at step 50 (no progress for over 30 s, phase train): rank 1 (node 1, "
                                    "job-master-0 on node-a) stopped (SIGSTOP?), pid 101, state T"), verdict.message
    hung = verdict.conditions()[0]
    assert (hung["type"], hung["status"], hung["reason"]) == ("Hung", "True", "Hung")


def test_progressing_has_no_step_in_its_message_and_names_a_straggler() -> None:
    pods = [answer([record(0, NOW - 1, NOW - 1), record(1, NOW - 1, NOW - 1, own=0.03)], {"0": "S", "1": "S"})]
    verdict = verdict_of(combine("job", pods, asked=False, thresholds=Thresholds(timeout=30)))
    assert verdict is not None and not verdict.hung
    assert verdict.message == "progressing: phase train, threshold 30 s"  # the same on every read
    assert verdict.stragglers == ("rank 1 (node 1, job-master-0 on node-a) straggles: 30.0 ms of its own per "
                                  "step (outside the collectives) vs a median of 1.0 ms on the other ranks",)


def test_no_records_no_verdict() -> None:
    assert verdict_of(combine("job", [answer([], {})], asked=False)) is None


def test_events_only_on_changes() -> None:
    hung = Verdict(True, "hung since ...", (), 7)
    fine = Verdict(False, "progressing", (), 9)
    assert transitions([], hung) == [("Warning", "Hung", "hung since ...")]
    assert transitions(hung.conditions(), hung) == []
    assert transitions(hung.conditions(), fine) == [("Normal", "Progressing", "progress resumed at step 9")]
    assert transitions(fine.conditions(), fine) == []
    slow = Verdict(False, "progressing", ("rank 1 straggles",), 9)
    assert transitions(fine.conditions(), slow) == [("Warning", "Straggler", "rank 1 straggles")]
    assert transitions(slow.conditions(), fine) == [("Normal", "NoStraggler", "no rank straggles any more")]


def test_a_restarted_controller_keeps_the_conditions_on_the_object_until_its_first_read() -> None:
    old = {"conditions": [{**condition("Running", True, "Running"), "lastTransitionTime": "t"},
                          {**condition("Hung", True, "Hung", "hung since"), "lastTransitionTime": "t"}]}
    assert carried(old, None) == [condition("Hung", True, "Hung", "hung since")]
    latest = Verdict(False, "progressing", (), 1).conditions()
    assert carried(old, latest) == latest


class _Jobs:
    def __init__(self, objs: list[dict[str, Any]]) -> None:
        self.objs = objs

    def items(self) -> list[dict[str, Any]]:
        return self.objs


def _watch(objs: list[dict[str, Any]], said: list[tuple[str, str, str]]) -> ClusterHangWatch:
    return ClusterHangWatch(rest=None, jobs=_Jobs(objs), spec_of=lambda o: None,  # type: ignore[arg-type]
                     record=lambda o, kind, reason, message: said.append((kind, reason, message)),
                     enqueue=lambda key: None)


def _job(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": name},
            "status": {"phase": phase, "target": "pytorchjob"}}


def test_a_job_ending_while_hung_gets_the_closing_event_and_is_forgotten() -> None:
    said: list[tuple[str, str, str]] = []
    hung = Verdict(True, "hung since ...", (), 7).conditions()
    objs = [_job("done", "Succeeded"), _job("again", "Created"), _job("fine", "Failed")]
    watch = _watch(objs, said)
    watch.conditions = {("ns", "done"): hung, ("ns", "again"): hung, ("ns", "gone"): hung,
                        ("ns", "fine"): Verdict(False, "progressing", (), 9).conditions()}
    watch.round()
    assert said == [("Normal", "Progressing", "no longer hung: the job Succeeded")]
    # Created again (pods recreated by a restart): the verdict is kept for the next Running read.
    assert watch.conditions == {("ns", "again"): hung}
    watch.round()
    assert len(said) == 1
