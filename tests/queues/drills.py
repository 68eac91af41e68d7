"""The shared parts of the fault drills: kubetrain commands as real child processes, pod logs the test writes
(so what the followers print can be compared line by line with what the pods wrote), and the kubetrain
controller as its own process. `ControlPlane.restart(component, down)` is the harness's crash-and-restart
call; tests/queues/test_restarts.py runs it under every follower at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import kubernetes

from tests.harness.helpers import wait_for
from tests.testenv.logfixtures import cri, now_stamp, serve_logs

T = TypeVar("T")


class Proc:
    """`kubetrain ARGS` as a child process, its output in files the test can poll."""

    started: ClassVar[list[Proc]] = []  # every one, so that a failed test can kill what it left running (reap)

    def __init__(self, tmp_path: Path, name: str, kubeconfig: Path, *args: str) -> None:
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.popen = subprocess.Popen([sys.executable, "-m", "kubetrain", *args], stdout=out, stderr=err,
                                          env=env, start_new_session=True)
        Proc.started.append(self)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            raise AssertionError(f"still running after {timeout}s; stderr:\n{self.stderr}") from None

    def clean_exit(self, timeout: float = 120) -> None:
        """Exit 0, and no traceback or interpreter abort (the issue's exit 134) on the way out."""
        code = self.wait(timeout)
        assert code == 0, f"exit {code}; stderr:\n{self.stderr}"
        assert "Traceback" not in self.stderr and "Fatal Python error" not in self.stderr, self.stderr


@contextmanager
def reaped() -> Iterator[None]:
    """Kill the processes started inside the block (the ones still running when a drill failed)."""
    before = len(Proc.started)
    try:
        yield
    finally:
        for proc in Proc.started[before:]:
            proc.kill()
        del Proc.started[before:]


def until(fn: Callable[[], T | None], what: str, context: Callable[[], str], timeout: float) -> T:
    """wait_for, and on a time-out the state of things then (a process's stderr, the controller's log)."""
    try:
        return wait_for(fn, what, timeout=timeout, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{context()}") from None


def running_pods(core: Any, namespace: str, count: int) -> list[str]:
    def names() -> list[str] | None:
        found = [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.status.phase == "Running"]
        return sorted(found) if len(found) >= count else None

    return wait_for(names, f"{count} Running pods", timeout=90, interval=0.2)  # type: ignore[no-any-return]


@dataclass
class PodLogs:
    """CRI log files kwok serves for some pods, and every line written, as `logs -f` prints it."""

    k8s: Any
    namespace: str
    tmp_path: Path
    files: dict[str, tuple[Path, str]] = field(default_factory=dict)  # pod → (file, replica)
    written: list[str] = field(default_factory=list)

    def serve(self, pod: str, replica: str) -> None:
        self.files[pod] = (self.tmp_path / f"{pod}.log", replica)
        self.files[pod][0].write_text("")
        serve_logs(self.k8s, self.namespace, pod, self.files[pod][0])

    def write(self, label: str, count: int) -> None:
        """Append `count` lines to every pod's log."""
        for pod, (path, replica) in self.files.items():
            lines = [f"{pod} {label} {i}" for i in range(count)]
            with path.open("a") as handle:
                handle.write(cri([(now_stamp(), line) for line in lines]))
            self.written += [f"[{replica}] {line}" for line in lines]

    def check(self, printed: list[str]) -> None:
        """Every written line printed exactly once, and each pod's lines in the order it wrote them."""
        assert sorted(printed) == sorted(self.written), "lines lost or repeated"
        for replica in {replica for _, replica in self.files.values()}:
            mine = [line for line in printed if line.startswith(f"[{replica}]")]
            assert mine == [line for line in self.written if line.startswith(f"[{replica}]")], replica


def start_controller(controlplane: Any, namespace: str, tmp_path: Path) -> Any:
    """`kubetrain controller run` as its own process under its ServiceAccount, watching `namespace`.

    Its Lease lasts 120 s (renew deadline 80 s; an API server start on a loaded machine can take 30 s), so
    it rides through a restart of a few seconds instead of exiting for its Deployment to restart it
    (tests/controller covers a controller killed and replaced, and the failover)."""
    from tests.controller.operator_env import Operator, install, sa_kubeconfig

    admin = controlplane.api_client()
    install(admin)
    config = sa_kubeconfig(admin, controlplane.kubeconfig, tmp_path / "sa-kubeconfig")
    return Operator(config, tmp_path / "controller.log", "--watch-namespace", namespace, "--lease-name",
                    f"lease-{namespace}", "--lease-duration", "120", "--progress-interval", "1", "--workers", "4")


def converged(k8s: Any, namespace: str, phases: dict[str, str]) -> bool:
    """Every TrainingJob has its phase, its status observed at its generation, and exactly one child
    PyTorchJob owned by it (by UID); no other PyTorchJob points at a TrainingJob."""
    from tests.controller.operator_env import GROUP, PLURAL, VERSION, custom

    api = custom(k8s)
    tjs = {t["metadata"]["name"]: t for t in api.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"]}
    children = [c for c in api.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")[
        "items"] if any(r["kind"] == "TrainingJob" for r in c["metadata"].get("ownerReferences") or [])]
    owners = sorted(r["uid"] for c in children for r in c["metadata"]["ownerReferences"])
    if owners != sorted(t["metadata"]["uid"] for t in tjs.values()) or set(tjs) != set(phases):
        return False
    return all((t.get("status") or {}).get("phase") == phases[name]
               and t["status"].get("observedGeneration") == t["metadata"]["generation"] for name, t in tjs.items())


def pods_of(k8s: Any, namespace: str, job: str) -> list[str]:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_pod(
        namespace, label_selector=f"training.kubeflow.org/job-name={job}").items
    return [p.metadata.name for p in items]
