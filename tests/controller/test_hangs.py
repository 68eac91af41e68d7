"""The controller's Hung and Straggler conditions against the real control plane, from real training ranks.

Two real torch ranks (gloo, all_reduce every step, kubetrain.runtime's progress records) run on this machine
in the progress directory a rendered pod has; kwok runs the pods/exec of the controller's probe here too, so
the controller (its own process, the manifests' RBAC) reads exactly these records through the API server.
Rank 1's data loader is slow (a straggler); SIGSTOPped, the job is Hung and says which rank is stopped;
SIGCONTed, it progresses again. With policy restart the hung job's pods are deleted and created again by the
training operator, once (maxRestarts 1); then the budget is spent.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from kubetrain import podenv
from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.jobs.logs import LogOptions, follow_job_logs
from kubetrain.kube.connection import connect
from tests.controller.operator_env import cond, create, custom, tj, training_job
from tests.controller.test_operator import pods
from tests.harness.helpers import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.torch]
HANG = {"timeoutSeconds": 3, "stepFactor": 2, "phaseTimeoutSeconds": 3, "stragglerFactor": 2}
RANK = textwrap.dedent("""
    import datetime, sys, time
    import torch
    import torch.distributed as dist
    from kubetrain.runtime.heartbeat import Heartbeat

    rank, slow, store = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    progress = Heartbeat.from_env(rank, 2)
    progress.start()
    progress.phase("train")
    tensor = torch.ones(1000)
    print("ready", flush=True)
    step = 0
    while True:
        time.sleep(slow)  # waiting for the next batch: rank 1's loader is slow
        began = time.perf_counter()
        dist.all_reduce(tensor)
        progress.collective(time.perf_counter() - began)
        step += 1
        progress.step(step)
""")


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Two ranks writing into the pods' progress directory on this machine (kwok's exec runs here)."""
    shutil.rmtree(podenv.POD_PROGRESS_DIR, ignore_errors=True)
    env = {**os.environ, podenv.PROGRESS_DIR_ENV: podenv.POD_PROGRESS_DIR}
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", RANK, str(rank), slow,  # a crash: on stderr
                               str(tmp_path / "store")],
                              stdout=subprocess.PIPE, text=True, env=env) for rank, slow in ((0, "0.001"), (1, "0.03"))]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(podenv.POD_PROGRESS_DIR, ignore_errors=True)


def ranks_alive(procs: list[subprocess.Popen[str]]) -> Callable[[], None]:
    """A wait_for guard: stop waiting, saying how, once a rank has ended (it runs until the fixture kills it)."""
    def check() -> None:
        ended = [f"rank {n} {ending(proc.returncode)}" for n, proc in enumerate(procs) if proc.poll() is not None]
        assert not ended, "; ".join(ended)
    return check


def ending(returncode: int) -> str:
    return f"was killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exited {returncode}"


def hang_job(name: str, namespace: str, checkpoint: Path | None = None, **hang: Any) -> dict[str, Any]:
    return training_job(name, namespace, nodes=1, hang={**HANG, **hang},
                        **({"checkpoint": {"dir": str(checkpoint), "ephemeral": True}} if checkpoint else {}))


def condition_is(k8s: Any, namespace: str, name: str, kind: str, status: str) -> dict[str, Any] | None:
    obj = tj(k8s, namespace, name)
    found = [c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return obj if found and found[0]["status"] == status else None


def events(k8s: Any, namespace: str, name: str) -> dict[str, list[str]]:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=TrainingJob").items
    out: dict[str, list[str]] = {}
    for event in items:
        out.setdefault(event.reason, []).append(event.message)
    return out


def pod_uid(k8s: Any, namespace: str, pod: str) -> str:
    return str(kubernetes.client.CoreV1Api(k8s).read_namespaced_pod(pod, namespace).metadata.uid)


def test_a_stopped_rank_makes_the_job_hung_and_resuming_clears_it(k8s: Any, namespace: str, start: Any,
                                                                   ranks: list[subprocess.Popen[str]],
                                                                   tmp_path: Path) -> None:
    op, alive = start("--hang-interval", "1"), ranks_alive(ranks)
    create(k8s, hang_job("hung", namespace, checkpoint=tmp_path / "ckpt"))  # kwok's exec: this machine's path
    pod = wait_for(lambda: pods(k8s, namespace, "hung", 1), "Running pod", 90, guard=alive)[0]
    straggling = wait_for(lambda: condition_is(k8s, namespace, "hung", "Straggler", "True"), "Straggler", 60,
                          guard=alive)
    message = cond(straggling, "Straggler")["message"]
    assert message.startswith(f"rank 1 (node 1, {pod} on ") and " straggles: " in message, message
    assert cond(straggling, "Hung")["status"] == "False" and cond(straggling, "Hung")["reason"] == "Progressing"

    os.kill(ranks[1].pid, signal.SIGSTOP)
    hung = wait_for(lambda: condition_is(k8s, namespace, "hung", "Hung", "True"), "Hung", 60, guard=alive)
    verdict = cond(hung, "Hung")
    assert verdict["reason"] == "Hung" and verdict["message"].startswith("hung since "), verdict
    assert "(no progress for over 3 s, phase train): " in verdict["message"], verdict
    assert f"rank 1 (node 1, {pod} on " in verdict["message"], verdict
    assert f"stopped (SIGSTOP?), pid {ranks[1].pid}, state T; 1 rank waits in " in verdict["message"], verdict
    TrainingJobStatus.model_validate(hung["status"])
    said = wait_for(lambda: events(k8s, namespace, "hung").get("Hung"), "the Hung Event", 30, guard=alive)
    saved = sorted((tmp_path / "ckpt" / "hangs").glob("hang-*"))
    assert len(said) == 1 and len(saved) == 1 and said[0] == f"{verdict['message']}; evidence saved in {saved[0]}"
    assert "all_reduce" in (saved[0] / "stacks-rank-0.txt").read_text()  # rank 0's stack, on the volume
    assert {p.name for p in saved[0].iterdir()} >= {"probe.json", "rank-0.json", "rank-1.json", "stacks-rank-0.txt"}
    assert events(k8s, namespace, "hung")["Straggler"][0].startswith("rank 1 (node 1, ")

    os.kill(ranks[1].pid, signal.SIGCONT)
    resumed = wait_for(lambda: condition_is(k8s, namespace, "hung", "Hung", "False"), "Hung cleared", 60,
                       guard=alive)
    assert cond(resumed, "Hung")["reason"] == "Progressing", resumed["status"]["conditions"]
    said = wait_for(lambda: events(k8s, namespace, "hung").get("Progressing"), "the Progressing Event", 30,
                    guard=alive)
    assert said[0].startswith("progress resumed at step "), said
    assert len(events(k8s, namespace, "hung")["Hung"]) == 1  # one Event per hang, not one per read
    print(*(f"{c['type']}={c['status']} {c['reason']}: {c['message']}" for c in hung["status"]["conditions"]),
          *(f"{r}: {m}" for r, ms in events(k8s, namespace, "hung").items() for m in ms), sep="\n")
    alive()  # the resumed rank trains on
    assert op.proc.poll() is None, op.text()[-3000:]


def test_policy_restart_recreates_the_pods_within_the_budget(controlplane: Any, k8s: Any, namespace: str,
                                                             start: Any, ranks: list[subprocess.Popen[str]]) -> None:
    """...and `logs -f`, following the job meanwhile, says once that the pod was re-created by the hang policy."""
    op, alive = start("--hang-interval", "1"), ranks_alive(ranks)
    create(k8s, hang_job("again", namespace, policy="restart", maxRestarts=1))
    pod = wait_for(lambda: pods(k8s, namespace, "again", 1), "Running pod", 90, guard=alive)[0]
    wait_for(lambda: condition_is(k8s, namespace, "again", "Hung", "False"), "Hung False", 60, guard=alive)
    first = pod_uid(k8s, namespace, pod)
    notices: list[str] = []
    connection = connect(kubeconfig=str(controlplane.kubeconfig))
    follower = threading.Thread(target=follow_job_logs, daemon=True, args=(
        connection, namespace, "again", None, LogOptions(), lambda _: None, notices.append), kwargs={"timeout": 300})
    follower.start()

    os.kill(ranks[1].pid, signal.SIGSTOP)  # the records stay stopped: kwok's new pod reads the same directory
    said = wait_for(lambda: (e := events(k8s, namespace, "again")) and "HangRestartBudget" in e and e,
                    "a restart, then the budget spent", 120, guard=alive)
    assert len(said["HangRestart"]) == 1 and re.fullmatch(
        r"restart 1 of 1 at step [\d,]+: deleting the 1 pods of the job; the ranks resume from the newest checkpoint",
        said["HangRestart"][0]), said
    assert said["HangRestartBudget"] == ["hung again after 1 restart(s) (spec.hang.maxRestarts 1): not restarting; "
                                         "the process-group timeout ends the job"], said
    recreated = wait_for(lambda: pods(k8s, namespace, "again", 1), "the pod created again", 60, guard=alive)[0]
    assert recreated == pod and pod_uid(k8s, namespace, pod) != first  # the training operator made a new one
    wait_for(lambda: any("was re-created" in n for n in notices), "logs -f reporting the re-creation", 30,
             guard=alive)
    assert [n for n in notices if "was re-created" in n] == [
        f"[master-0] pod {pod} was re-created: restarted by the hang policy"], notices
    status = custom(k8s).get_namespaced_custom_object("kubetrain.dev", "v1alpha1", namespace, "trainingjobs",
                                                      "again")["status"]
    assert status["hang"]["restarts"] == 1 and status["hang"]["lastRestartStep"] > 0, status
    TrainingJobStatus.model_validate(status)
    assert op.proc.poll() is None, op.text()[-3000:]
