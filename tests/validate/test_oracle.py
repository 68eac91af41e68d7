"""The real API server as the oracle (tests/validate/oracle.py): a fixed seed of mutated manifests per kind,
each judged offline by kubetrain and by a `dryRun=All` create of the object and of every pod template wrapped
in a Pod on the suite's control plane (training-operator v1.9.4 and Trainer v2.3.0 webhooks installed).

A false green (kubetrain says valid, the server or pod creation rejects it) fails the test, with the case
shrunk to the mutation that causes it. benchmarks/bench_validate_oracle.py runs the long version and reports
false reds too."""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from kubetrain.validate import SchemaStore
from tests.validate import oracle

pytestmark = pytest.mark.controlplane
SEED = 22
PER_KIND = 200
BUILTIN = ["Pod", "Deployment", "Job", "ConfigMap", "Secret", "Service", "PersistentVolumeClaim"]


def _no_false_greens(kind: str, client: kubernetes.client.ApiClient, namespace: str, store: SchemaStore) -> None:
    outcomes = oracle.run(list(oracle.cases(kind, PER_KIND, SEED)), client, namespace, store)
    wrong = [oracle.shrink(o, client, namespace, store) for o in outcomes if o.false_green]
    assert not wrong, f"{len(wrong)} of {len(outcomes)} {kind}s valid offline but rejected by the server:\n" + \
        "\n".join(wrong[:10])
    assert any(o.server for o in outcomes) and any(not o.server for o in outcomes), "the generator lost its range"


@pytest.mark.parametrize("kind", BUILTIN)
def test_builtin_kinds_against_the_server(kind: str, k8s: kubernetes.client.ApiClient, namespace: str,
                                          schema_store: SchemaStore) -> None:
    _no_false_greens(kind, k8s, namespace, schema_store)


def test_pytorchjobs_against_the_server(k8s: kubernetes.client.ApiClient, namespace: str,
                                        schema_store: SchemaStore) -> None:
    _no_false_greens("PyTorchJob", k8s, namespace, schema_store)


def test_trainjobs_against_the_server(trainer: Any, k8s: kubernetes.client.ApiClient, namespace: str,
                                      schema_store: SchemaStore) -> None:
    _no_false_greens("TrainJob", k8s, namespace, schema_store)
