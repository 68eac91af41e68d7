"""Crash the API server, and separately etcd, under every long-running command at once: `submit --follow`,
`logs -f`, `submit --wait`, `gpu --watch` and the kubetrain controller (`kubetrain controller run`), each a
real process. One restart serves them all (a drill costs a control-plane restart, so they share it).

What must hold afterwards: every follower exits 0 with no traceback; the log followers printed every line
the pods wrote, before and after the crash, exactly once and in each pod's order; `submit --wait` reports
the job's real end; `gpu --watch` printed all its tables; the controller, still running, has exactly one
child per TrainingJob and mirrors status changes made after the restart. docs/reliability.md lists them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from tests.controller.operator_env import create, pytorchjob, training_job
from tests.queues.drills import (
    PodLogs,
    Proc,
    converged,
    pods_of,
    reaped,
    running_pods,
    start_controller,
    until,
)
from tests.testenv.specs import write_spec

pytestmark = pytest.mark.controlplane
LINES = 40  # per pod, before and after the crash
TABLES = 5  # gpu --watch rounds, 1 s apart: the outage falls between the first and the last


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    with reaped():
        yield


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_restart_under_every_follower_and_the_controller(component: str, controlplane: Any, namespace: str,
                                                         k8s: Any, tmp_path: Path) -> None:
    kc, ns = controlplane.kubeconfig, ["-n", namespace]
    logs = PodLogs(k8s, namespace, tmp_path)
    logs.serve("drill-master-0", "master-0")
    logs.serve("drill-worker-0", "worker-0")
    logs.write("before", LINES)
    controller = start_controller(controlplane, namespace, tmp_path)
    try:
        for i in range(3):
            create(k8s, training_job(f"ctl-{i}", namespace, nodes=1))
        follow = Proc(tmp_path, "follow", kc, "submit", "-f", str(write_spec(tmp_path, "drill", nodes=2)), *ns,
                      "--follow", "--timeout", "300")
        waited = Proc(tmp_path, "wait", kc, "submit", "-f", str(write_spec(tmp_path, "waited", nodes=1, gpus=0)),
                      *ns, "--wait", "--timeout", "300")
        running_pods(kubernetes.client.CoreV1Api(k8s), namespace, 2 + 1 + 3)
        tail = Proc(tmp_path, "logs", kc, "logs", "drill", "-f", *ns)
        for proc in (follow, tail):
            until(lambda p=proc: p.stdout.count("] drill-") >= 2 * LINES, "the first lines",
                  lambda p=proc: p.stderr, timeout=90)
        until(lambda: converged(k8s, namespace, dict.fromkeys(("ctl-0", "ctl-1", "ctl-2"), "Running")),
              "the controller's first children", lambda: controller.text()[-3000:], timeout=120)
        # Last, as its rounds are short: the restart comes right after its first table.
        gpu = Proc(tmp_path, "gpu", kc, "gpu", "drill", "--watch", "--interval", "1", "--count", str(TABLES), *ns)
        until(lambda: "POD" in gpu.stdout, "a first GPU table", lambda: gpu.stderr, timeout=60)

        controlplane.restart(component, down=3)

        logs.write("after", LINES)
        for pod in pods_of(k8s, namespace, "ctl-0"):  # a status change the controller must not miss
            controlplane.set_pod_phase(namespace, pod, "Succeeded")
        for i in range(3, 5):  # and new work
            create(k8s, training_job(f"ctl-{i}", namespace, nodes=1))
        for proc in (follow, tail):
            until(lambda p=proc: p.stdout.count("] drill-") >= 4 * LINES, "the lines written after the restart",
                  lambda p=proc: p.stderr, timeout=120)
        for pod in (*logs.files, "waited-master-0"):
            controlplane.set_pod_phase(namespace, pod, "Succeeded")

        follow.clean_exit()
        assert follow.stdout.splitlines()[0] == "drill"  # the job's name, then its merged logs
        logs.check(follow.stdout.splitlines()[1:])
        assert follow.stderr.splitlines()[-1].startswith(f"PyTorchJob {namespace}/drill Succeeded"), follow.stderr
        tail.clean_exit()
        logs.check(tail.stdout.splitlines())
        waited.clean_exit()
        assert waited.stderr.rstrip().endswith(f"PyTorchJob {namespace}/waited Succeeded"), waited.stderr
        gpu.clean_exit()
        assert gpu.stdout.count("POD ") == TABLES, gpu.stdout  # every table, on both sides of the restart
        if component == "kube-apiserver":  # refused connections: each follower says so, then that it is back
            for proc in (follow, tail, waited):
                assert "cannot reach" in proc.stderr and "reconnected to the API server" in proc.stderr, proc.stderr
            assert "retrying" in gpu.stderr and "reconnected" in gpu.stderr, gpu.stderr

        phases = {"ctl-0": "Succeeded", **{f"ctl-{i}": "Running" for i in range(1, 5)}}
        until(lambda: converged(k8s, namespace, phases), "the controller to converge",
              lambda: controller.text()[-3000:], timeout=180)
        assert all(pytorchjob(k8s, namespace, f"ctl-{i}") for i in range(5))
        assert controller.proc.poll() is None, controller.text()[-3000:]  # rode through: no exit, no restart
        assert "Traceback" not in controller.text(), controller.text()[-3000:]
    finally:
        code = controller.stop()
    assert code == 0, controller.text()[-3000:]
