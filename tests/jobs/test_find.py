"""Tier 2: finding a job by name without a discovery round trip (kubetrain.jobs.crud.find with targets=None),
against the real apiserver: a kind the cluster does not serve answers a bare 404, a missing job a Status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain import jobs
from kubetrain.errors import ClusterError
from kubetrain.jobs import apply, crud
from kubetrain.jobs.targets import NOT_INSTALLED, PYTORCHJOB, Target
from kubetrain.kube.connection import Connection, connect
from tests.queues.counting import counting
from tests.testenv.specs import render, write_spec

pytestmark = pytest.mark.controlplane

UNSERVED = Target("widgetjob", "widgets.example.com", "v1", "widgetjobs", "WidgetJob", "widgets.example.com/job",
                  (), "widget operator")


@pytest.fixture
def conn(controlplane: Any) -> Connection:
    return connect(kubeconfig=str(controlplane.kubeconfig))


def test_find_probes_kinds_with_the_get_itself(conn: Connection, namespace: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    apply.submit(conn.rest, PYTORCHJOB, render(write_spec(tmp_path, "probed", nodes=1), namespace))
    monkeypatch.setattr(crud, "AUTO_ORDER", (UNSERVED, PYTORCHJOB))
    with counting() as seen:
        target, obj = jobs.find(conn.rest, None, namespace, "probed")
    assert target is PYTORCHJOB and obj["metadata"]["name"] == "probed"
    # one GET per kind tried, and no discovery (/apis/GROUP/VERSION) before them
    assert seen == [f"GET /apis/widgets.example.com/v1/namespaces/{namespace}/widgetjobs/probed",
                    f"GET /apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/probed"]


def test_find_names_only_the_served_kinds_when_the_job_is_missing(conn: Connection, namespace: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crud, "AUTO_ORDER", (UNSERVED, PYTORCHJOB))
    with pytest.raises(ClusterError) as missing:
        jobs.find(conn.rest, None, namespace, "nope")
    assert str(missing.value) == (f"no PyTorchJob named nope in namespace {namespace} "
                                  f"(list them: kubetrain list -n {namespace})")
    with pytest.raises(ClusterError, match="namespace no-such-ns does not exist"):
        jobs.find(conn.rest, None, "no-such-ns", "nope")


def test_find_says_what_to_install_when_no_kind_is_served(conn: Connection, namespace: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crud, "AUTO_ORDER", (UNSERVED,))
    with pytest.raises(ClusterError) as none:
        jobs.find(conn.rest, None, namespace, "nope")
    assert str(none.value) == NOT_INSTALLED
    # an explicit kind the cluster does not serve is still an error that names the request
    with pytest.raises(ClusterError, match="widgetjobs"):
        jobs.find(conn.rest, [UNSERVED], namespace, "nope")


def test_list_asks_each_kind_and_skips_the_ones_not_served(conn: Connection, namespace: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    apply.submit(conn.rest, PYTORCHJOB, render(write_spec(tmp_path, "listed", nodes=1), namespace))
    monkeypatch.setattr(crud, "AUTO_ORDER", (UNSERVED, PYTORCHJOB))
    with counting() as seen:
        found = jobs.list_jobs(conn.rest, None, namespace)
    assert [(j.name, j.target) for j in found] == [("listed", "pytorchjob")]
    assert seen == [f"GET /apis/widgets.example.com/v1/namespaces/{namespace}/widgetjobs",
                    f"GET /apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"]
    monkeypatch.setattr(crud, "AUTO_ORDER", (UNSERVED,))
    with pytest.raises(ClusterError) as none:
        jobs.list_jobs(conn.rest, None, namespace)
    assert str(none.value) == NOT_INSTALLED
