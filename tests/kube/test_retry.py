"""Backoff on 429/5xx/connection resets, Retry-After honoured; the scripted fake API plays the flaky API server."""

from __future__ import annotations

import pytest

from kubetrain.errors import ClusterError
from kubetrain.kube.errors import ApiError
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest
from kubetrain.kube.retry import RetryPolicy, backoff, delay_for, retry_after
from tests.testenv.fakeapi import RESET, Answer, FakeApi, status_answer

NAMESPACES = {"apiVersion": "v1", "kind": "NamespaceList", "metadata": {"resourceVersion": "7"},
              "items": [{"metadata": {"name": "default"}}]}


def api_for(host: str, sleeps: list[float], attempts: int = 5) -> Rest:
    endpoint = Endpoint(server=host, context=None, namespace=None)
    return Rest(endpoint, policy=RetryPolicy(attempts=attempts, base=0.01, cap=5.0), sleep=sleeps.append)


def namespaces(rest: Rest) -> list[str]:
    return [n["metadata"]["name"] for n in rest.get("/api/v1/namespaces")["items"]]


def serving_namespaces(fake_api: FakeApi, *first: Answer) -> str:
    fake_api.script(*first)
    fake_api.otherwise(Answer(200, NAMESPACES))
    return fake_api.url


def test_429_and_5xx_are_retried_honouring_retry_after(fake_api: FakeApi) -> None:
    server = serving_namespaces(fake_api, status_answer(429, headers={"Retry-After": "3"}), status_answer(503),
                                status_answer(500))
    sleeps: list[float] = []
    assert namespaces(api_for(server, sleeps)) == ["default"]
    assert len(fake_api.seen) == 4
    assert sleeps[0] == 3.0  # Retry-After wins over the 10 ms backoff
    assert all(s < 1 for s in sleeps[1:])


def test_connection_reset_is_retried(fake_api: FakeApi) -> None:
    server = serving_namespaces(fake_api, RESET, RESET)
    sleeps: list[float] = []
    assert namespaces(api_for(server, sleeps))
    assert len(fake_api.seen) == 3 and len(sleeps) == 2


def test_gives_up_after_the_attempts_with_the_last_error(fake_api: FakeApi) -> None:
    server = serving_namespaces(fake_api, *[status_answer(503)] * 10)
    sleeps: list[float] = []
    with pytest.raises(ApiError) as caught:
        namespaces(api_for(server, sleeps, attempts=3))
    assert caught.value.status == 503 and len(fake_api.seen) == 3 and len(sleeps) == 2


def test_client_errors_are_not_retried(fake_api: FakeApi) -> None:
    server = serving_namespaces(fake_api, status_answer(403), status_answer(404))
    with pytest.raises(ApiError) as caught:
        namespaces(api_for(server, []))
    assert caught.value.status == 403 and len(fake_api.seen) == 1


def test_connection_refused_is_one_clusterError_naming_the_server() -> None:
    sleeps: list[float] = []
    with pytest.raises(ClusterError) as caught:
        namespaces(api_for("http://127.0.0.1:1", sleeps))
    assert str(caught.value) == "cannot reach http://127.0.0.1:1: is the cluster running? (kubectl cluster-info)"
    assert sleeps == []  # refused is not retried: the cluster is down


def test_delay_for_is_the_one_retry_rule() -> None:
    policy = RetryPolicy(base=0.5, jitter=0, attempts=3)
    assert delay_for(1, policy, status=429, headers={"Retry-After": "1"}) == 1.0
    assert delay_for(2, policy, status=503) == 1.0
    assert delay_for(3, policy, status=503) is None  # out of attempts
    assert delay_for(1, policy, status=500, body=b"failed to create typed patch object") is None
    assert delay_for(1, policy, status=403) is None
    assert delay_for(1, policy, exc=ConnectionResetError()) == 0.5
    assert delay_for(1, policy, exc=ConnectionRefusedError()) is None  # the cluster is down


def test_backoff_is_exponential_jittered_and_capped() -> None:
    policy = RetryPolicy(base=1, factor=2, cap=5, jitter=0.5)
    assert backoff(1, policy, rand=lambda: 0.5) == 1
    assert backoff(2, policy, rand=lambda: 0.0) == 1  # 2 - 50 %
    assert backoff(3, policy, rand=lambda: 1.0) == 5  # 4 + 50 % = 6, capped
    assert backoff(1, policy, after=30, rand=lambda: 0.5) == 5  # Retry-After is capped too


def test_retry_after_parsing() -> None:
    assert retry_after({"Retry-After": "2"}) == 2.0
    assert retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    assert retry_after({"Retry-After": "soon"}) is None
    assert retry_after(None) is None
