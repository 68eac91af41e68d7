"""Shared fixtures: paths, the upstream reference CRDs (tests only), and a schema store built from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubetrain.validate import SchemaStore
from kubetrain.validate.schemas import load_crd_source

pytest_plugins = ["tests.testenv.plugin"]

REPO = Path(__file__).resolve().parent.parent
# Upstream CRDs live beside the clone (../shared/reference); the product never reads them.
REFERENCE = Path(os.environ.get("KUBETRAIN_REFERENCE_DIR", REPO.parent / "shared" / "reference"))
PYTORCHJOB_CRD = REFERENCE / "kubeflow-training-operator-v1.9.4" / "kubeflow.org_pytorchjobs.yaml"
TRAINER_DIR = REFERENCE / "kubeflow-trainer-v2.3.0"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not PYTORCHJOB_CRD.is_file():
        message = f"upstream reference CRDs not found at {REFERENCE} (set KUBETRAIN_REFERENCE_DIR)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return REFERENCE


@pytest.fixture(scope="session")
def schema_store(reference_dir: Path) -> SchemaStore:
    store = SchemaStore()
    for location in (PYTORCHJOB_CRD, TRAINER_DIR):
        for crd, source in load_crd_source(str(location)):
            store.add_crd(crd, source)
    return store
