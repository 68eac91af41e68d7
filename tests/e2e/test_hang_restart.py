"""spec.hang.policy restart in the cluster, on the real node: the controller (its own process, the manifests'
RBAC) finds a digits TrainingJob hung after one worker's training process is SIGSTOPped, says so (Hung
condition and Event naming the stopped rank's pod), saves every rank's stack and record on the checkpoint
volume, deletes the job's pods; the training operator creates them
again, the ranks resume from the newest checkpoint, and the job finishes with final parameters identical to an
uninterrupted run's (sha256 over the checkpoints' parameters)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tests.controller.operator_env import Operator, create, namespaced_operator, phase_is, tj
from tests.testenv.polling import TimedOut, wait_for

from .conftest import Cli
from .test_recovery import EPOCHS, _exec, _model_hash, _starts
from .test_stacks import STOP

pytestmark = [pytest.mark.slow, pytest.mark.torch]
# phaseTimeoutSeconds: the worker is stopped right after the first checkpoint appears, when rank 0 may still be in
# its checkpoint phase (waiting for rank 1 in the barrier after the save): that phase's limit then applies, and
# at 300 s it outlasted the wait below in CI. Startup and a digits checkpoint take seconds.
HANG = {"timeoutSeconds": 20, "stepFactor": 10, "phaseTimeoutSeconds": 60, "policy": "restart", "maxRestarts": 1}


@pytest.fixture
def operator(controlplane: Any, real_node: Any, namespace: str, tmp_path: Path) -> Iterator[Operator]:
    op = namespaced_operator(controlplane, namespace, tmp_path, "--progress-interval", "5", "--hang-interval", "5")
    yield op
    op.stop()


def _job(project: Path, image: str, namespace: str, name: str) -> dict[str, Any]:
    doc = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec = doc["spec"]
    spec.pop("code")
    spec.pop("build")
    spec.update(image=image, resources={"cpu": "250m", "memory": "1Gi"}, hang=HANG,
                checkpoint={"dir": f"/ckpt/{name}", "everySteps": 10, "keep": 2})
    spec["train"]["epochs"] = EPOCHS  # still training after the first checkpoint (as in test_recovery)
    return {**doc, "metadata": {"name": name, "namespace": namespace}}


def _events(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, list[str]]:
    items = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=TrainingJob").items
    out: dict[str, list[str]] = {}
    for event in items:
        out.setdefault(event.reason, []).append(event.message)
    return out


def test_a_hung_job_is_restarted_and_resumes_to_identical_parameters(k8s: Any, cli: Cli, image: str, project: Path,
                                                                     namespace: str, claim: Path, real_node: Any,
                                                                     operator: Operator) -> None:
    core = kubernetes.client.CoreV1Api(real_node.cp.api_client())
    for name in ("digits-href", "digits-hang"):
        create(k8s, _job(project, image, namespace, name))
    worker = "digits-hang-worker-0"
    wait_for(lambda: any((claim / "digits-hang").glob("step-*.pt")), "the first checkpoint of digits-hang", 600, 1)

    def stop() -> bool:
        try:
            code, stopped = _exec(core, namespace, worker, ["python3", "-c", STOP])
        except kubernetes.client.exceptions.ApiException:
            return False
        return code == 0 and bool(stopped.split())

    wait_for(stop, f"a training process to stop in {worker}", 60, 1)
    try:
        said = wait_for(lambda: (e := _events(core, namespace, "digits-hang")) and "HangRestart" in e and e,
                        "the controller to restart the hung job", 240, 2)
    except TimedOut as exc:
        conditions = ((tj(k8s, namespace, "digits-hang") or {}).get("status") or {}).get("conditions")
        raise AssertionError(f"{exc}\nEvents: {_events(core, namespace, 'digits-hang')}\nconditions: {conditions}"
                             f"\ncontroller log: {operator.text()[-3000:]}") from None
    assert f"{worker} on " in said["Hung"][0] and "stopped (SIGSTOP?)" in said["Hung"][0], said
    assert said["Hung"][0].startswith("hung since "), said
    # The evidence, taken before the restart, is on the checkpoint volume: one directory per pod.
    saved = sorted((claim / "digits-hang" / "hangs").glob("hang-*"))
    assert len(saved) == 2, saved
    assert all(f"/ckpt/digits-hang/hangs/{d.name}" in said["Hung"][0] for d in saved), said
    stacks = [(d / "stacks-rank-0.txt").read_text() for d in saved if (d / "stacks-rank-0.txt").is_file()]
    assert len(stacks) == 1 and "(most recent call first)" in stacks[0], stacks  # rank 0's stack
    assert any((d / "rank-1.json").is_file() for d in saved)  # the stopped rank: its record (no stack)
    for name in ("digits-href", "digits-hang"):
        wait_for(lambda n=name: phase_is(k8s, namespace, n, "Succeeded"), f"{name} Succeeded", 900, 2)

    status = (tj(k8s, namespace, "digits-hang") or {})["status"]
    assert status["hang"]["restarts"] == 1, status
    logged = cli("logs", "digits-hang", "-n", namespace).stdout
    resumed = [s for s in _starts(logged) if s.get("resumed_from")]
    assert resumed and int(str(resumed[-1]["start_step"])) > 0, _starts(logged)
    assert _model_hash(claim / "digits-hang") == _model_hash(claim / "digits-href")
    # After the restart: "progress resumed", or (a resumed run can end between two hang rounds) "no longer hung".
    wait_for(lambda: "Progressing" in _events(core, namespace, "digits-hang"), "the Progressing event", 30, 1)
    print(*(f"{reason}: {message}" for reason, messages in _events(core, namespace, "digits-hang").items()
            for message in messages), sep="\n")
    assert operator.proc.poll() is None, operator.text()[-3000:]
