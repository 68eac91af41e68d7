"""The controller's informer has one backoff around its watch (watch.stream's): its requests are not retried
underneath by the client, and a refused list is waited out and listed again. The scripted fake API plays the
API server (the real one cannot answer 503 on demand)."""

from __future__ import annotations

import logging
import threading

import pytest

from kubetrain.controller import kube
from kubetrain.controller.crd import GROUP, PLURAL, VERSION
from kubetrain.controller.informer import Informer
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest
from tests.testenv.fakeapi import Answer, FakeApi, Seen, status_answer

JOB = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}}


def lists_and_watches(request: Seen) -> Answer:
    """Lists answer with JOB; watches end empty after a moment."""
    if "watch=true" in request.path:
        return Answer(200, b"", delay=0.05)
    return Answer(200, {"metadata": {"resourceVersion": "5"}, "items": [JOB]})


@pytest.fixture
def rest(fake_api: FakeApi) -> Rest:
    fake_api.otherwise(lists_and_watches)
    return Rest(Endpoint(server=fake_api.url, context=None, namespace=None))


def answered(fake_api: FakeApi) -> list[str]:
    return [f"{'watch' if 'watch=true' in seen.path else 'list'} {status}"
            for seen, status in zip(fake_api.seen, fake_api.statuses, strict=False)]


def test_a_refused_list_is_backed_off_by_the_informer_alone(rest: Rest, fake_api: FakeApi,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    fake_api.script(status_answer(503, reason="ServiceUnavailable"), status_answer(503, reason="ServiceUnavailable"))
    informer = Informer(PLURAL, kube.custom_list_fn(rest, GROUP, VERSION, PLURAL, "ns"), lambda _obj: None)
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    with caplog.at_level(logging.WARNING, logger="kubetrain.controller"):
        thread.start()
        assert informer.synced.wait(10)
        stop.set()  # the thread ends at its next wait (the server is gone after the test)
    assert answered(fake_api)[:3] == ["list 503", "list 503", "list 200"] and informer.items() == [JOB]
    # The client did not retry the 503s by itself: the informer's stream heard of the first one, and of its end.
    assert [r.getMessage() for r in caplog.records][:2] == [
        f"{PLURAL}: 503 Service Unavailable; retrying", f"{PLURAL}: reconnected to the API server"]
