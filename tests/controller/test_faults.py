"""The controller under faults: TrainingJobs deleted, re-created and edited at random while its reconcile,
progress and hang loops all run. The controller is its own process under the manifests' RBAC; its exit at any
point is the failure. Afterwards the jobs still there must be right, and /metrics counts what went wrong.

Every job's rank-0 log grows all along (a metrics line every few hundred ms), so every progress round
patches every running job: a job deleted while a round is under way is patched after its deletion.
"""

from __future__ import annotations

import random
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.exceptions import ApiException

from kubetrain.metrics import format_metrics
from tests.controller.operator_env import GROUP, PLURAL, VERSION, create, custom, phase_is, pytorchjob, training_job
from tests.harness.helpers import wait_for
from tests.testenv import kwok

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]
JOBS, OPERATIONS, SEED = 8, 30, 20260


class GrowingLogs:
    """Appends a metrics line to each job's master log every `period` seconds (kwok reads the file anew for
    every log request)."""

    def __init__(self, controlplane: Any, namespace: str, period: float = 0.3) -> None:
        self.controlplane, self.namespace, self.period = controlplane, namespace, period
        self.files: dict[str, Path] = {}
        self.step = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def add(self, pod: str) -> None:
        with self.lock:
            if pod not in self.files:  # a re-created job's pod has the same name: the same Logs object
                self.controlplane.set_pod_logs(self.namespace, pod, self._lines())
                self.files[pod] = self.controlplane.workdir / "kwok" / f"{self.namespace}_{pod}_all.log"

    def _lines(self) -> list[str]:
        self.step += 1
        return [format_metrics("train", rank=0, step=self.step, total_steps=100_000, loss=1.0,
                               samples_per_s=64.0, time=1000.0 + self.step)]

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            with self.lock:
                text = kwok.cri_log(self._lines())
                for path in self.files.values():
                    with path.open("a") as handle:
                        handle.write(text)

    def __enter__(self) -> GrowingLogs:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def _alive(op: Any) -> None:
    assert op.proc.poll() is None, f"the controller exited ({op.proc.returncode}):\n{op.text()[-6000:]}"


def _gone(k8s: Any, namespace: str, name: str) -> None:
    try:
        custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _operation(rng: random.Random, k8s: Any, namespace: str, jobs: set[str]) -> str:
    """One random fault; returns what it did."""
    api = custom(k8s)
    name = rng.choice(sorted(jobs))
    what = rng.choice(["delete", "delete", "recreate", "annotate", "spec", "status", "child"])
    if what == "delete" and len(jobs) > JOBS // 2:
        _gone(k8s, namespace, name)
        jobs.discard(name)
    elif what == "recreate":  # the same name, a new UID, while the informer may still hold the old one
        _gone(k8s, namespace, name)
        wait_for(lambda: _absent(k8s, namespace, name), f"{name} deleted", 30, interval=0.05)
        create(k8s, training_job(name, namespace, nodes=1))
    elif what == "annotate":
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                           {"metadata": {"annotations": {"drill": str(rng.random())}}})
    elif what == "spec":  # a new generation: reported (update policy report), the child keeps running
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                           {"spec": {"env": {"DRILL": str(rng.randrange(1000))}}})
    elif what == "status":  # another writer clobbers the status: the controller must write it back
        api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name,
                                                  {"status": {"progress": None, "phase": "Pending"}})
    elif what == "child":
        try:
            api.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    else:
        return "none"
    return f"{what} {name}"


def _absent(k8s: Any, namespace: str, name: str) -> bool:
    try:
        custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except ApiException as exc:
        return exc.status == 404
    return False


def _settled(k8s: Any, namespace: str, name: str, step: int) -> dict[str, Any] | None:
    """The job's status is right again: Running on its own child, this generation observed, progress at
    least `step` (the log's last step when the writer stopped)."""
    obj = phase_is(k8s, namespace, name, "Running")
    if obj is None:
        return None
    status, meta = obj["status"], obj["metadata"]
    child = pytorchjob(k8s, namespace, name)
    owners = [r["uid"] for r in ((child or {}).get("metadata") or {}).get("ownerReferences") or []]
    fresh = (status.get("progress") or {}).get("step", 0) >= step
    return obj if owners == [meta["uid"]] and status.get("observedGeneration") == meta["generation"] and fresh else None


def _pods_of(k8s: Any, namespace: str) -> list[str]:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_pod(namespace).items
    return [p.metadata.name for p in items if p.metadata.name.endswith("-master-0")]


def test_random_deletes_and_edits_never_end_the_controller(controlplane, k8s, namespace, start):
    op = start("--progress-interval", "0.5", "--hang-interval", "1")
    jobs = {f"drill-{i}" for i in range(JOBS)}
    for name in sorted(jobs):
        create(k8s, training_job(name, namespace, nodes=1))
    rng = random.Random(SEED)
    done: list[str] = []
    with GrowingLogs(controlplane, namespace) as logs:
        wait_for(lambda: all(phase_is(k8s, namespace, n, "Running") for n in jobs), "every job Running", 120)
        for pod in _pods_of(k8s, namespace):
            logs.add(pod)
        for _ in range(OPERATIONS):
            done.append(_operation(rng, k8s, namespace, jobs))
            for pod in _pods_of(k8s, namespace):
                logs.add(pod)
            time.sleep(rng.uniform(0, 0.3))
            _alive(op)
        wait_for(lambda: all(phase_is(k8s, namespace, n, "Running") for n in jobs), "the jobs Running again", 120)
        time.sleep(2)  # rounds that started before the last faults end
    last = logs.step
    for name in sorted(jobs):
        wait_for(lambda name=name: _settled(k8s, namespace, name, last), f"{name}'s status right again", 90)
    _alive(op)
    port = re.search(r"/metrics on [\d.]+:(\d+)", op.text()).group(1)  # type: ignore[union-attr]
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    errors = [line for line in metrics.splitlines() if "errors_total" in line]
    print("\n".join(["operations:", *done, "controller errors:", *errors]))
    assert all(re.fullmatch(r'kubetrain_controller_errors_total\{loop="\w+",kind="\w+"\} \d+(\.0)?', e)
               for e in errors), errors
