"""`kubetrain stacks`' pod side on real processes: the probe (the exact command the exec runs, here in a local
shell) signals two real runtime ranks, one SIGSTOPped, and the answers are combined as for a job's pods."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain import podenv
from kubetrain.jobs import stacks as job_stacks_module
from kubetrain.jobs.gpu import ExecResult
from kubetrain.jobs.pods import Replica
from kubetrain.jobs.stacks import PodAnswer, ask_pod, combine, job_stacks, probe_command
from kubetrain.observe import probe
from kubetrain.observe.stacks import process_state
from tests.observe.ranks import pending_signals
from tests.testenv.polling import wait_for

RANK = textwrap.dedent("""
    import os, sys, time
    from kubetrain.runtime.heartbeat import Heartbeat

    def waiting_in_all_reduce():
        print("ready", flush=True)
        while True:
            time.sleep(0.05)

    progress = Heartbeat.from_env(int(sys.argv[1]), 2)
    progress.start()
    progress.step(1)
    waiting_in_all_reduce()
""")


def replica(label: str, pod: str, phase: str = "Running", state: str = "running") -> Replica:
    return Replica(label, label.partition("-")[0], 0, pod, "uid", "pytorch", phase, "node-a", 0, state, "", None, 0)


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    env = {**os.environ, podenv.PROGRESS_DIR_ENV: str(tmp_path), podenv.HANG_ENV: '{"timeoutSeconds": 60}'}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(n)], stdout=subprocess.PIPE, text=True, env=env)
             for n in (0, 1)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run_probe(directory: Path, ask: bool = True) -> ExecResult:
    env = {**os.environ, podenv.PROGRESS_DIR_ENV: str(directory), podenv.HANG_ENV: '{"timeoutSeconds": 60}'}
    done = subprocess.run(probe_command(ask), capture_output=True, text=True, env=env, timeout=60, check=False)
    return ExecResult(done.stdout, done.stderr, done.returncode)


def test_the_probe_names_a_stopped_rank_with_its_state_and_shows_the_others_stack(
        tmp_path: Path, ranks: list[subprocess.Popen[str]]) -> None:
    os.kill(ranks[1].pid, signal.SIGSTOP)
    wait_for(lambda: process_state(ranks[1].pid) == "T", "state T", 10, 0.05)
    pod = ask_pod(None, "ns", replica("master-0", "job-master-0"), lambda *_: run_probe(tmp_path))  # type: ignore[arg-type]
    assert pod.message == "" and pod.answer is not None
    report = combine("job", [pod, PodAnswer(replica("worker-0", "job-worker-0", "Pending", "waiting"),
                                            message="not running (ContainerCreating)")])
    text = "\n".join(report.lines())
    assert report.lines()[0] == (  # one step: still starting up
        "job: not hung: step 1, phase start, threshold 1800 s; 1 rank(s) did not answer"), text
    assert f"--- rank 1 (node 1, job-master-0 on node-a) stopped (SIGSTOP?), pid {ranks[1].pid}, state T" in text
    assert "--- rank 0 (node 1): training thread, innermost first" in text
    assert "    waiting_in_all_reduce (<string>:" in text
    assert report.messages() == ["worker-0 (job-worker-0): not running (ContainerCreating)"]


def test_a_stopped_rank_is_not_signalled_and_answers_once_resumed(
        tmp_path: Path, ranks: list[subprocess.Popen[str]]) -> None:
    """A SIGUSR2 left pending runs faulthandler's dump when the rank resumes, while its writer thread runs Python:
    that dump reads the other threads' frames without the GIL, and crashed the rank (SIGSEGV). Resumed, the
    rank's writer thread answers the request with the GIL held."""
    os.kill(ranks[1].pid, signal.SIGSTOP)
    wait_for(lambda: process_state(ranks[1].pid) == "T", "state T", 10, 0.05)
    assert probe.probe(tmp_path, answer_seconds=0)["states"]["1"] == "T"
    assert signal.SIGUSR2 not in pending_signals(ranks[1].pid)
    os.kill(ranks[1].pid, signal.SIGCONT)
    wait_for(lambda: process_state(ranks[1].pid) in ("R", "S"), "rank 1 running again", 10, 0.05)
    dump = probe.probe(tmp_path)["dumps"]["1"]
    assert dump.startswith(podenv.STACKS_ANSWER) and "waiting_in_all_reduce" in dump, dump
    assert all(proc.poll() is None for proc in ranks)


def test_status_reads_the_records_only_and_names_the_rank_that_cannot_run(
        tmp_path: Path, ranks: list[subprocess.Popen[str]]) -> None:
    os.kill(ranks[1].pid, signal.SIGSTOP)
    wait_for(lambda: process_state(ranks[1].pid) == "T", "state T", 10, 0.05)
    pod = ask_pod(None, "ns", replica("master-0", "p"), lambda *_: run_probe(tmp_path, ask=False))  # type: ignore[arg-type]
    report = combine("job", [pod], asked=False)
    assert report.has_ranks
    assert report.hang_lines() == [f"job: not hung: step 1, phase start, threshold 1800 s; 1 rank(s) cannot run: "
                                   f"rank 1 (node 1, p on node-a) stopped (SIGSTOP?), pid {ranks[1].pid}, state T"]
    assert not (tmp_path / podenv.FR_REQUEST).exists()  # nothing was asked of the ranks
    assert all(podenv.stacks_path(tmp_path, n).read_text() == "" for n in (0, 1))


def test_a_pod_without_records_has_no_ranks_and_the_probe_touches_nothing(tmp_path: Path) -> None:
    result = run_probe(tmp_path)
    assert result.exit_code == 0 and json.loads(result.stdout)["records"] == []
    assert list(tmp_path.iterdir()) == []
    assert not combine("job", [ask_pod(None, "ns", replica("master-0", "p"), lambda *_: result)]).has_ranks  # type: ignore[arg-type]


def test_a_probe_that_cannot_run_says_why() -> None:
    failed = ExecResult("", "no python in the container\n", 127)
    pod = ask_pod(None, "ns", replica("worker-1", "p"), lambda *_: failed)  # type: ignore[arg-type]
    assert pod.message == "the probe failed (exit 127): no python in the container"


def test_the_probe_uses_the_same_file_names_as_the_runtime(tmp_path: Path) -> None:
    source = Path(probe.__file__).read_text()
    for named in (podenv.record_path, podenv.stacks_path, podenv.flight_record_path):
        path = named(tmp_path, 7)
        assert path.name.replace("7", "") in source.replace("{rank}", "").replace("{r['rank']}", "")
    assert f'"{podenv.FR_REQUEST}"' in source and f'"{podenv.POD_PROGRESS_DIR}"' in source
    assert (probe.STACKS_REQUEST, probe.ANSWER, probe.ANSWERED) == (
        podenv.STACKS_REQUEST, podenv.STACKS_ANSWER, podenv.STACKS_ANSWERED)
    assert f"{podenv.PROGRESS_DIR_ENV}=" in source and f'"{podenv.HANG_ENV}"' in source


def test_the_probe_saves_the_evidence_or_says_why_not(tmp_path: Path, ranks: list[subprocess.Popen[str]]) -> None:
    env = {**os.environ, podenv.PROGRESS_DIR_ENV: str(tmp_path)}
    command = probe_command(save=str(tmp_path / "volume" / "hangs"))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=True)
    saved = Path(json.loads(done.stdout)["saved"])
    assert saved.parent == tmp_path / "volume" / "hangs" and saved.name.startswith("hang-")
    assert {"rank-0.json", "rank-1.json", "stacks-rank-0.txt", "probe.json"} <= {p.name for p in saved.iterdir()}
    assert "waiting_in_all_reduce" in (saved / "stacks-rank-1.txt").read_text()
    (tmp_path / "file").write_text("")
    refused = subprocess.run(probe_command(save=str(tmp_path / "file" / "hangs")), capture_output=True, text=True,
                             env=env, timeout=60, check=True)
    assert json.loads(refused.stdout)["saved"].startswith(f"error: {tmp_path / 'file' / 'hangs'}/hang-")


NOW = 1_000_000.0


def pod_record(rank: int, world: int, step: int, stale: bool) -> dict[str, object]:
    """A rank's record as the runtime writes it: 60 steps of 0.1 s; a stale one stopped 30 s ago."""
    written = NOW - (30 if stale else 1)
    return {"rank": rank, "world_size": world, "node": rank + 1, "pid": 100 + rank, "step": step,
            "phase": "train", "phase_since": NOW - 900, "step_at": written - 0.05, "written_at": written,
            "step_p99": 0.1, "steps_timed": 60, "own_p50": 0.02, "own_timed": 60,
            "step_times": [0.1] * 60, "own_times": [0.08 if rank == 1 else 0.02] * 60}


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 5), stopped=st.integers(0, 4), wanted=st.integers(0, 4), pending=st.booleans())
def test_the_verdict_is_the_same_whichever_replica_is_asked(world: int, stopped: int, wanted: int,
                                                             pending: bool) -> None:
    """One pod per rank (master-0, worker-0, ...); one rank stopped 30 s ago, the last pod maybe pending.
    `stacks --replica X` judges the whole job as `stacks` does: only the stacks shown differ."""
    labels = ["master-0"] + [f"worker-{n}" for n in range(world - 1)]
    replicas = [replica(label, f"job-{label}", "Pending" if pending and n == world - 1 else "Running",
                        "waiting" if pending and n == world - 1 else "running") for n, label in enumerate(labels)]
    by_pod = {r.pod: n for n, r in enumerate(replicas)}

    def answer(_rest: object, _ns: str, pod: str, _container: str) -> ExecResult:
        rank = by_pod[pod]
        record = pod_record(rank, world, 40 if rank == stopped % world else 41, rank == stopped % world)
        return ExecResult(json.dumps({"records": [record], "dumps": {}, "states": {}, "flight": {}, "now": NOW,
                                      "hang": '{"timeoutSeconds": 20}'}), "", 0)

    def judge(selected: str) -> tuple[object, ...]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(job_stacks_module, "job_replicas", lambda *_: replicas)
            patch.setattr(job_stacks_module, "exec_records", answer)
            patch.setattr(job_stacks_module, "down_nodes", lambda *_: {})  # no API server here: every node is up
            report = job_stacks(None, None, "ns", "job", selected, run=answer)  # type: ignore[arg-type]
        a = report.assessment
        return a.hung, a.since, a.step, a.limit, a.phase, a.missing, [r.rank for r in a.stale], \
            [s.rank.rank for s in a.stragglers], report.headline().split(";")[0]

    everyone = judge("all")
    assert judge(labels[wanted % world]) == everyone
    assert judge("worker") == everyone
