"""The submit pipeline's own decisions (kubetrain.submit), against the scripted fake API: what `gpus.via: auto`
resolves to, how a failed preflight is refused, how long --wait-for-capacity waits. The whole pipeline against
the real control plane is tests/jobs/test_apply.py and tests/cluster/test_preflight.py."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain import submit
from kubetrain.checks import FAIL, OK, WARN, Check
from kubetrain.errors import ClusterError
from kubetrain.jobs.targets import PYTORCHJOB
from kubetrain.jobspec.model import JobSpec
from kubetrain.kube.connection import Connection
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest
from kubetrain.kube.retry import RetryPolicy
from kubetrain.kube.watch import WaitTimeout
from tests.testenv.fakeapi import Answer, FakeApi, status_answer


class Messages:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []
        self.checks: list[Check] = []

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def check(self, result: Check) -> None:
        self.checks.append(result)


def connection(url: str) -> Connection:
    return Connection(Rest(Endpoint(server=url, context=None, namespace=None), policy=RetryPolicy(attempts=1)),
                      None, None)


def dra_spec() -> JobSpec:
    return JobSpec.model_validate({"image": "example.com/t:1", "command": ["python", "t.py"], "gpusPerNode": 8,
                                   "gpus": {"via": "auto"}})


@pytest.mark.parametrize(("answer", "via", "warned"), [
    (Answer(200, {"kind": "DeviceClass"}), "dra", False),
    (status_answer(404, reason="NotFound"), "plugin", False),
    (status_answer(403, reason="Forbidden"), "plugin", True),
], ids=["the DeviceClass exists", "no DeviceClass", "may not read it"])
def test_gpus_via_auto_asks_the_cluster_for_the_device_class(fake_api: FakeApi, answer: Answer, via: str,
                                                             warned: bool) -> None:
    fake_api.script(answer)
    messages = Messages()
    assert submit.resolve_gpu_via(connection(fake_api.url), dra_spec(), messages) == via
    assert [s.path for s in fake_api.seen] == ["/apis/resource.k8s.io/v1/deviceclasses/gpu.nvidia.com"]
    assert bool(messages.warnings) == warned and bool(messages.infos) != warned


def test_a_failed_preflight_is_refused_naming_the_checks_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    results = [Check("API server", OK, "reachable"), Check("fit", FAIL, "can never fit"),
               Check("queue", FAIL, "no such LocalQueue"), Check("operator", WARN, "elsewhere")]
    monkeypatch.setattr("kubetrain.cluster.preflight.run", lambda *args: results)
    messages = Messages()
    with pytest.raises(ClusterError) as refused:
        submit.run_preflight(connection("http://127.0.0.1:1"), PYTORCHJOB, [{}], "ns", frozenset(), messages)
    assert str(refused.value) == ("preflight failed (2 check(s) marked ✗): fix them, or "
                                  "--skip-preflight=fit,queue to submit anyway")
    assert messages.checks == results  # each check reported before the refusal


def test_waiting_for_capacity_ends_at_its_timeout_with_the_last_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    verdicts: list[Any] = []

    def not_now(*args: Any) -> Check:
        verdicts.append(args)
        return Check("fit", WARN, "not now: 2 GPUs held")

    monkeypatch.setattr("kubetrain.cluster.preflight.fit_check", not_now)
    messages = Messages()
    with pytest.raises(WaitTimeout, match=r"^timed out after 0.05s waiting for GPU capacity: not now: 2 GPUs held$"):
        submit.wait_for_capacity(connection("http://127.0.0.1:1"), PYTORCHJOB, [{}], "ns", 0.05, messages,
                                 every=0.01)
    assert len(verdicts) >= 2 and messages.infos == ["--wait-for-capacity: waiting until the job fits the free GPUs"]


def test_an_unknown_dry_run_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="dry_run must be one of"):
        submit.submit(connection("http://127.0.0.1:1"), None, "ns", submit.SubmitOptions(dry_run="maybe"),  # type: ignore[arg-type]
                      Messages())
