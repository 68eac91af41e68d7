"""`kubetrain stacks NAME`: every rank's Python stack from a running job, grouped, with the hang verdict.

One exec per running pod (in parallel) runs kubetrain.observe.probe with the image's Python: it asks the pod's
ranks for their stacks (kubetrain.runtime's writer thread answers; SIGUSR2 only to a rank that does not), and
reads back their progress records, the new stack dumps, the /proc state of ranks that could not answer, and
their flight recorders.
Judging and printing are kubetrain.observe.hang and kubetrain.observe.stacks, as in `kubetrain run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubetrain.jobs.gpu import PARALLEL_EXECS, Exec, ExecResult, exec_command, exec_replica
from kubetrain.jobs.nodes import NodeHealth, down_nodes, silent_kubelet
from kubetrain.jobs.pods import Replica, job_replicas, select
from kubetrain.jobs.targets import Target
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.rest import Rest
from kubetrain.observe import probe
from kubetrain.observe.hang import Assessment, RankView, Thresholds, assess
from kubetrain.observe.stacks import (
    UNRESPONSIVE,
    RankStack,
    collect,
    describe_silent,
    flight_recorder_summary,
    render,
    verdict,
)

PROBE_TIMEOUT = 30.0  # the probe waits up to probe.ANSWER_SECONDS for the ranks; the rest is Python's start
# The image's Python runs the probe's source: no kubetrain needed in the image, no version skew with the CLI.
_LAUNCH = ('for p in python3 python; do command -v "$p" >/dev/null 2>&1 && exec "$p" -c "$0" "$@"; done; '
           'echo "no python in the container" >&2; exit 127')


def probe_command(ask: bool = True, save: str | None = None) -> list[str]:
    """ask=False: read the records only (no signal, no wait). save: also copy the evidence into a new
    directory under this one (in the pod: a volume's path)."""
    extra = ["records"] if not ask else ["save", save] if save else []
    return ["sh", "-c", _LAUNCH, Path(probe.__file__).read_text(), *extra]


def exec_probe(rest: Rest, namespace: str, pod: str, container: str) -> ExecResult:
    return exec_command(rest, namespace, pod, container, probe_command(), PROBE_TIMEOUT)


def exec_records(rest: Rest, namespace: str, pod: str, container: str) -> ExecResult:
    return exec_command(rest, namespace, pod, container, probe_command(ask=False), PROBE_TIMEOUT)


def exec_saving(directory: str) -> Exec:
    """The full probe (stacks, flight recorder), saving the evidence under `directory` in the pod."""
    def run(rest: Rest, namespace: str, pod: str, container: str) -> ExecResult:
        return exec_command(rest, namespace, pod, container, probe_command(save=directory), PROBE_TIMEOUT)
    return run


@dataclass(frozen=True)
class PodAnswer:
    """One pod's probe output, or why there is none (`message`)."""

    replica: Replica
    answer: dict[str, Any] | None = None
    message: str = ""


@dataclass(frozen=True)
class JobStacks:
    """The job's ranks at one instant: the assessment, every rank's stack, and pods that could not be asked."""

    name: str
    assessment: Assessment
    stacks: list[RankStack]
    flight: str | None
    pods: list[PodAnswer] = field(default_factory=list)
    asked: bool = True  # False: records only (status --hang); `stacks` then holds the ranks that cannot run

    @property
    def has_ranks(self) -> bool:
        return bool(self.stacks) or self.assessment.since is not None or self.assessment.phase == "done"

    def headline(self) -> str:
        a = self.assessment
        if a.hung:
            return verdict(a, self.stacks)
        if a.phase == "done":
            return f"{self.name}: every rank has finished (step {a.step:,})"
        silent = [s for s in self.stacks if not s.answered]
        what = "did not answer" if self.asked else "cannot run: " + "; ".join(map(describe_silent, silent))
        return (f"{self.name}: not hung: step {a.step:,}, phase {a.phase}, threshold {a.limit:.0f} s"
                + (f"; {len(silent)} rank(s) {what}" if silent else ""))

    def hang_lines(self) -> list[str]:
        """What `kubetrain status --hang` shows: the headline and stragglers."""
        return [self.headline(), *(f"straggler: {s.describe()}" for s in self.assessment.stragglers)]

    def lines(self) -> list[str]:
        """The report (stdout): headline, stragglers, the flight recorder, the grouped stacks."""
        lines = self.hang_lines()
        if self.flight:
            lines.append(self.flight)
        return lines + render(self.stacks)

    def messages(self) -> list[str]:
        """Pods that could not be asked, one line each (stderr)."""
        return [f"{p.replica.label} ({p.replica.pod}): {p.message}" for p in self.pods if p.message]


def ask_pod(rest: Rest, namespace: str, replica: Replica, run: Exec = exec_probe,
            down: dict[str, NodeHealth] | None = None) -> PodAnswer:
    """One pod's probe answer; `down`: nodes known to be down (their pods are said so, not asked)."""
    if replica.phase != "Running" or replica.state != "running":
        return PodAnswer(replica, message=f"not running ({replica.reason or replica.phase})")
    if (health := (down or {}).get(replica.node or "")) is not None:
        return PodAnswer(replica, message=f"{health.describe()}; not asked")
    result = exec_replica(rest, namespace, replica, run)
    if result.timed_out:
        return PodAnswer(replica, message=silent_kubelet(rest, replica, rest.kubelet_timeout, "answer"))
    if result.exit_code != 0:
        detail = (result.stderr or result.error or result.stdout).strip().splitlines()
        return PodAnswer(replica, message=f"the probe failed (exit {result.exit_code}): "
                                          f"{detail[-1] if detail else 'no output'}")
    try:
        return PodAnswer(replica, json.loads(result.stdout))
    except ValueError:
        return PodAnswer(replica, message=f"unexpected probe output: {result.stdout[:120]!r}")


def _views(pod: PodAnswer) -> list[RankView]:
    """The pod's ranks, labelled with the pod and its node."""
    assert pod.answer is not None
    where = pod.replica.pod + (f" on {pod.replica.node}" if pod.replica.node else "")
    views = []
    for record in pod.answer.get("records") or []:
        with contextlib.suppress(KeyError, ValueError, TypeError):
            views.append(dataclasses.replace(RankView.parse(record), host=where))
    return views


def combine(name: str, pods: list[PodAnswer], asked: bool = True, thresholds: Thresholds | None = None,
            shown: Collection[str] | None = None) -> JobStacks:
    """One JobStacks from every pod's answer (pure: the tests feed it real probe output). The verdict is
    judged on every pod's records; `shown`: the pods (names) whose stacks the report shows (default all).
    `thresholds`: the spec's (the controller knows it); else the pods' $KUBETRAIN_HANG."""
    answered = [p for p in pods if p.answer is not None]
    ranks: list[RankView] = []
    dumps: dict[int, str] = {}
    states: dict[int, str | None] = {}
    flights: dict[int, Any] = {}
    world = 0
    for pod in answered:
        assert pod.answer is not None
        ranks += _views(pod)
        dumps |= {int(k): v for k, v in (pod.answer.get("dumps") or {}).items()}
        states |= {int(k): v for k, v in (pod.answer.get("states") or {}).items()}
        flights |= {int(k): v for k, v in (pod.answer.get("flight") or {}).items()}
        world = max([world, *(int(r.get("world_size", 0)) for r in pod.answer.get("records") or [])])
    now = max((float(p.answer["now"]) for p in answered if p.answer is not None), default=None)
    thresholds = thresholds or Thresholds.from_json(next((p.answer.get("hang") for p in answered if p.answer), None))
    assessment = assess(ranks, world or len(ranks), thresholds, now)
    mine = {r.rank for p in answered if shown is None or p.replica.pod in shown for r in _views(p)}
    live = [r for r in ranks if r.phase != "done" and r.rank in mine]
    stacks = collect(live, dumps, states)
    if not asked:
        stacks = [s for s in stacks if s.state is None or s.state in UNRESPONSIVE]
    flight = flight_recorder_summary(flights, world or len(ranks), None if shown is None else mine)
    return JobStacks(name, assessment, stacks, flight, pods, asked)


def job_stacks(rest: Rest, target: Target, namespace: str, name: str, replica: str = "all",
               run: Exec = exec_probe, asked: bool = True) -> JobStacks:
    """Ask the selected pods of the job with `run` and read the others' records (exec_records: nothing
    signalled), all in parallel, and combine the answers: the verdict is the job's, whichever replica is
    asked; the stacks are the selected pods' (asked=False with exec_records: the records only)."""
    replicas = job_replicas(rest, target, namespace, name)
    chosen = {r.pod for r in select(replicas, replica)}
    runs = [(r, run if r.pod in chosen else exec_records) for r in replicas]
    return combine(name, ask_each(rest, namespace, name, runs), asked, shown=chosen)


def ask_pods(rest: Rest, namespace: str, name: str, replicas: list[Replica], run: Exec = exec_probe
             ) -> list[PodAnswer]:
    """Every replica's answer, asked in parallel (at most PARALLEL_EXECS execs at once)."""
    return ask_each(rest, namespace, name, [(r, run) for r in replicas])


def ask_each(rest: Rest, namespace: str, name: str, runs: list[tuple[Replica, Exec]]) -> list[PodAnswer]:
    """Each replica's answer to its own probe, asked in parallel (at most PARALLEL_EXECS execs at once); pods
    on a node that is down are not asked (nodes.down_nodes)."""
    with cluster_errors(f"exec the stacks probe in the pods of {name} in namespace {namespace}"):
        down = down_nodes(rest, [replica for replica, _ in runs])
        with ThreadPoolExecutor(min(PARALLEL_EXECS, max(1, len(runs)))) as pool:
            return list(pool.map(lambda pair: ask_pod(rest, namespace, pair[0], pair[1], down), runs))
