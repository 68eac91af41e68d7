"""`kubetrain run`'s hang watch: read every rank's progress record, declare a hang, show every rank's stack,
and act on spec.hang.policy (observe, fail, restart from the last checkpoint). See docs/hangs.md.

The ranks write their records into a per-run directory (KUBETRAIN_PROGRESS_DIR, kubetrain.runtime.heartbeat);
reading it costs one small file per rank per CHECK_SECONDS. On a hang the watch asks the ranks' writer threads
for their stacks and torch's flight recorder (kubetrain.observe.probe.ask_stacks: SIGUSR2 only to a rank that
does not answer and is not stopped), and reads /proc/PID/stat of the ranks that cannot answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from kubetrain.local.endings import RankFailure
from kubetrain.local.plan import NodeCommand, RunPlan, free_port
from kubetrain.local.supervisor import Supervisor, processes_of_run
from kubetrain.observe.hang import Assessment, RankView, Thresholds, assess
from kubetrain.observe.probe import ask_stacks
from kubetrain.observe.stacks import (
    UNRESPONSIVE,
    collect,
    flight_recorder_summary,
    process_state,
    render,
    verdict,
)
from kubetrain.podenv import (
    FR_DUMP_FILE_ENV,
    FR_DUMP_PREFIX,
    FR_REQUEST,
    PROGRESS_DIR_ENV,
    flight_record_path,
    progress_env,
)

CHECK_SECONDS = 1.0
ANSWER_SECONDS = 3.0  # ranks' time to write stacks and flight records (their writer looks every 0.2 s)
HANG_EXIT_CODE = 1


def read_ranks(directory: Path) -> list[RankView]:
    """Every rank's last record (unreadable or half-known files are skipped: the next check reads them)."""
    ranks = []
    for path in directory.glob("rank-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            ranks.append(RankView.parse(json.loads(path.read_text())))
    return ranks


def with_progress(plan: RunPlan, directory: Path) -> RunPlan:
    """The plan with the progress directory and torch's flight recorder in every agent's env (values the user
    set in spec.env win; the plan numbers the agents, kubetrain.podenv.NODE_ENV)."""
    ours = progress_env(str(directory))
    here = {key: ours[key] for key in (PROGRESS_DIR_ENV, FR_DUMP_FILE_ENV)}  # not the pod's paths
    nodes = [NodeCommand(node.index, node.argv, {**ours, **node.env, **here})
             for node in plan.nodes]
    return dataclasses.replace(plan, nodes=nodes)


def with_fresh_endpoint(plan: RunPlan) -> RunPlan:
    """The plan with a new rendezvous port (the previous attempt's port may still be in TIME_WAIT)."""
    port = free_port()
    nodes = []
    for node in plan.nodes:
        argv = list(node.argv)
        argv[argv.index("--rdzv-endpoint") + 1] = f"127.0.0.1:{port}"
        nodes.append(NodeCommand(node.index, argv, node.env))
    return dataclasses.replace(plan, nodes=nodes)  # node 1's launcher serves the store on the new port


class LocalHangWatch:
    """Called by the Supervisor's wait loop; `check()` is True when the job must be stopped (policy fail
    or restart), after the report has been printed."""

    def __init__(self, plan: RunPlan, directory: Path, thresholds: Thresholds, policy: str, err: TextIO) -> None:
        self.plan = plan
        self.directory = directory
        self.world_size = len(plan.nodes) * plan.procs_per_node
        self.thresholds = thresholds
        self.policy = policy
        self.err = err
        self.started = time.time()
        self.next_check = 0.0
        self.reported_since: float | None = None
        self.stragglers_told: set[int] = set()
        self.hangs = 0
        self.stopped = False

    def check(self) -> bool:
        now = time.time()
        if now < self.next_check:
            return False
        self.next_check = now + CHECK_SECONDS
        assessment = assess(read_ranks(self.directory), self.world_size, self.thresholds, now, self.started)
        for straggler in assessment.stragglers:
            if straggler.rank.rank not in self.stragglers_told:
                self.stragglers_told.add(straggler.rank.rank)
                self.say(f"straggler: {straggler.describe()}")
        if not assessment.hung:
            return False
        # One report per hang: `since` is the last progress of any rank, so the same `since` is the same hang,
        # even when a check in between found none (a resumed rank's record counts again before its next step,
        # and its phase may carry a longer threshold).
        if self.reported_since == assessment.since:
            return False
        self.reported_since = assessment.since
        self.hangs += 1
        self._report(assessment)
        self.stopped = self.policy != "observe"
        return self.stopped

    def say(self, text: str) -> None:
        print(f"kubetrain run: {text}", file=self.err, flush=True)

    def _report(self, assessment: Assessment) -> None:
        ranks = [r for r in read_ranks(self.directory) if r.phase != "done"]
        dumps, states, records = self.ask(ranks)
        stacks = collect(ranks, dumps, states)
        lines = [verdict(assessment, stacks)]
        summary = flight_recorder_summary(records, self.world_size)
        if summary:
            lines.append(summary)
        lines += render(stacks)
        action = {"observe": "policy observe: still waiting (spec.hang.policy fail or restart acts on it)",
                  "fail": "policy fail: stopping the job", "restart": "policy restart: stopping the job to restart "
                  "it from its last checkpoint"}[self.policy]
        lines.append(action)
        report = self.directory / f"hang-{self.hangs}.txt"
        with contextlib.suppress(OSError):
            report.write_text("\n".join(lines) + "\n")
        for line in lines:
            self.say(line)

    def ask(self, ranks: list[RankView]) -> tuple[dict[int, str], dict[int, str | None], dict[int, Any]]:
        """Ask every rank of this run (never a reused PID) for its stacks and flight record; (new stack text,
        /proc state, flight record) per rank, after at most ANSWER_SECONDS (+ probe.FALLBACK_SECONDS)."""
        ours = set(processes_of_run(self.plan.run_id))
        pids = {r.rank: r.pid for r in ranks if r.pid in ours}
        requested = time.time()
        with contextlib.suppress(OSError):
            (self.directory / FR_REQUEST).write_text(str(requested))

        def flown() -> bool:  # every rank that can run dumped its flight recorder
            found = self._flight_records(ranks, requested)
            return all(rank in found for rank, pid in pids.items() if process_state(pid) not in UNRESPONSIVE | {None})

        dumps = {r.rank: "" for r in ranks} | ask_stacks(self.directory, pids, ANSWER_SECONDS, flown)
        states = {r.rank: process_state(r.pid) if r.pid in ours else None for r in ranks}
        return dumps, states, self._flight_records(ranks, requested)

    def _flight_records(self, ranks: list[RankView], requested: float) -> dict[int, Any]:
        records = {}
        for rank in ranks:
            path = flight_record_path(self.directory, rank.rank)
            with contextlib.suppress(OSError, ValueError):
                if path.stat().st_mtime >= requested - 1:
                    records[rank.rank] = json.loads(path.read_bytes())
        return records


def supervise(plan: RunPlan, hang: Any, out: TextIO, err: TextIO,
              divergence: Callable[[], str | None] | None = None
              ) -> tuple[int, list[str], RankFailure | None]:
    """Run the plan under a LocalHangWatch (and the Supervisor's `divergence` check); with policy restart, start it
    again (resuming from the last checkpoint) up to hang.maxRestarts times; returns the exit status, the
    last attempt's failed ranks (one line each) and its first failed rank with its last log lines. The
    progress directory is removed unless it holds a hang report or a dump of torch's flight recorder (written
    by its watchdog when a collective times out)."""
    directory = Path(tempfile.mkdtemp(prefix=f"kubetrain-{plan.run_id}-"))
    thresholds = Thresholds.from_spec(hang)
    restarts = 0
    reported = False
    try:
        attempt = with_progress(plan, directory)
        while True:
            watch = LocalHangWatch(attempt, directory, thresholds, hang.policy, err)
            supervisor = Supervisor(attempt, out=out, err=err, watch=watch, divergence=divergence)
            code = supervisor.run()
            reported = reported or watch.hangs > 0
            if not watch.stopped:
                return code, supervisor.failures, supervisor.tails.first_failure()
            if hang.policy != "restart":
                return HANG_EXIT_CODE, [], None
            if restarts >= hang.maxRestarts:
                watch.say(f"the job hung again after {restarts} restart(s) (spec.hang.maxRestarts); giving up")
                return HANG_EXIT_CODE, [], None
            restarts += 1
            watch.say(f"restarting the job from its last checkpoint (restart {restarts} of {hang.maxRestarts})")
            for stale in directory.glob("rank-*.json"):
                stale.unlink(missing_ok=True)
            attempt = with_fresh_endpoint(attempt)
    finally:
        if reported or any(directory.glob(f"{FR_DUMP_PREFIX}*")):  # a report, or torch's dump on a timeout
            print(f"kubetrain run: hang reports, stacks and flight recorder dumps kept in {directory}", file=err,
                  flush=True)
        else:
            shutil.rmtree(directory, ignore_errors=True)
