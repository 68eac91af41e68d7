"""The differential test (tests/validate/differential.py): schema- and YAML-driven cases judged by the suite's
real control plane; `validate --exact` must agree on every case, the offline mode must never refuse one the
control plane accepts. A small fixed sample here; benchmarks/bench_validate_differential.py runs them all."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.jobs.localapi import LocalApiServer as Server
from kubetrain.jobs.localapi import install_crds
from kubetrain.jobs.localwebhooks import LocalWebhooks
from kubetrain.rules.k8s.versions import DEFAULT
from kubetrain.validate import SchemaStore
from kubetrain.validate.schemas import load_crd_source
from tests.conftest import JOBSET_CRD, PYTORCHJOB_CRD, TRAINER_DIR, LocalApiServer
from tests.harness.helpers import rest_for
from tests.validate.differential import KINDS, crd_schemas, judge, sample

PER_KIND, SEED = 12, 7


def test_exact_agrees_and_offline_never_refuses_what_the_server_accepts(
        k8s: Any, trainer: Any, namespace: str, local_apiserver: LocalApiServer, schema_store: SchemaStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    crds = [crd for location in (PYTORCHJOB_CRD, TRAINER_DIR, JOBSET_CRD) for crd, _ in load_crd_source(str(location))]
    cases = sample(KINDS, crd_schemas(crds), PER_KIND, SEED)
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", local_apiserver.env["KUBETRAIN_CACHE_DIR"])
    server = Server(DEFAULT, str(local_apiserver.binaries))
    with server.using() as local:
        install_crds(local, server.dir, crds)
        webhooks = LocalWebhooks(local, server.dir, str(local_apiserver.binaries), DEFAULT, None)
        results = judge(cases, rest_for(k8s), namespace, local, schema_store, k8s, webhooks)
    disagree = [v.describe() for v in results if v.exact_disagrees]
    false_red = [v.describe() for v in results if v.false_red]
    assert not disagree, f"{len(disagree)} of {len(results)}:\n" + "\n".join(disagree[:5])
    assert not false_red, f"{len(false_red)} of {len(results)}:\n" + "\n".join(false_red[:5])
    assert {bool(v.server) for v in results} == {True, False}  # the sample has both verdicts
