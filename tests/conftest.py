"""Shared fixtures: paths, the upstream reference CRDs (tests only), and a schema store built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.validate import SchemaStore
from kubetrain.validate.schemas import load_crd_source
from tests.testenv import reference
from tests.testenv.plugin import in_ci  # the one CI check; tests import it from here

pytest_plugins = ["tests.testenv.plugin", "tests.testenv.timing", "tests.testenv.stress",
                  "tests.testenv.workers", "pytester"]

REPO = Path(__file__).resolve().parent.parent
# Upstream CRDs, copied by `make testenv` from the pinned Go modules (tests/testenv/reference.py);
# the product never reads them.
REFERENCE = reference.reference_dir()
PYTORCHJOB_CRD = reference.pytorchjob_crd(REFERENCE)
TRAINER_DIR = reference.trainer_dir(REFERENCE)


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    try:
        return reference.verify(REFERENCE)
    except reference.ReferenceMissing as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def schema_store(reference_dir: Path) -> SchemaStore:
    store = SchemaStore()
    for location in (PYTORCHJOB_CRD, TRAINER_DIR):
        for crd, source in load_crd_source(str(location)):
            store.add_crd(crd, source)
    return store
