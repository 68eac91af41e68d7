"""Shared fixtures: paths, the upstream reference CRDs (tests only), and a schema store built from them.

Tests marked `torch` (tests/runtime, tests/local, ...) need the runtime extra. Without torch they are skipped
locally, but under CI=true a missing torch is a failure: CI must install `.[runtime,examples]`.
"""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubetrain.validate import SchemaStore
from kubetrain.validate.schemas import load_crd_source
from tests.testenv import binaries, reference
from tests.testenv.plugin import in_ci, unavailable  # the one CI check; tests import it from here

pytest_plugins = ["tests.testenv.plugin", "tests.testenv.timing", "tests.testenv.stress", "tests.testenv.fakeapi",
                  "tests.testenv.workers", "pytester"]

REPO = Path(__file__).resolve().parent.parent
# Upstream CRDs, copied by `make testenv` from the pinned Go modules (tests/testenv/reference.py);
# the product never reads them.
REFERENCE = reference.reference_dir()
PYTORCHJOB_CRD = reference.pytorchjob_crd(REFERENCE)
TRAINER_DIR = reference.trainer_dir(REFERENCE)
JOBSET_CRD = reference.jobset_crd(REFERENCE)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (pytest, torch, kubetrain, the test modules) lives as long as the session:
    frozen (gc.freeze: the permanent generation, as the CLI does at exit), no full collection walks it again.
    The Trainer collects at the end of every fit: 0.3-0.5 s of each in-process fit went to walking torch's
    objects. Unfrozen at the end: the interpreter's exit collects them as usual (frozen, torch's bindings
    report them as leaked)."""
    gc.freeze()


def pytest_unconfigure(config: pytest.Config) -> None:
    gc.unfreeze()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("torch") and importlib.util.find_spec("torch") is None:
        if in_ci():
            pytest.fail("torch is not installed but CI=true: install the extras (pip install -e '.[runtime,examples]')")
        pytest.skip("torch is not installed (pip install -e '.[runtime,examples]')")


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


@dataclass(frozen=True)
class LocalApiServer:
    """`validate --exact` on the suite's etcd and kube-apiserver and the reference CRDs: `flags` for the CLI,
    `env` (its own cache dir, so the local server is the session's) for CliRunner.invoke(..., env=env)."""

    flags: list[str]
    env: dict[str, str]
    binaries: Path


@pytest.fixture(scope="session")
def local_apiserver(tmp_path_factory: pytest.TempPathFactory, reference_dir: Path) -> Iterator[LocalApiServer]:
    """The local API server of `validate --exact`, shared by the session and stopped at its end."""
    from kubetrain.jobs.localapi import stop_all

    try:
        found = binaries.resolve(("etcd", "kube-apiserver"))["kube-apiserver"].parent
    except binaries.MissingBinaries as exc:
        unavailable(str(exc))
        raise
    env = {"KUBETRAIN_CACHE_DIR": str(tmp_path_factory.mktemp("exact-cache"))}
    flags = ["--exact", "--server-binaries", str(found), "--schema", str(PYTORCHJOB_CRD), "--schema", str(TRAINER_DIR),
             "--schema", str(JOBSET_CRD)]
    try:
        yield LocalApiServer(flags, env, found)
    finally:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("KUBETRAIN_CACHE_DIR", env["KUBETRAIN_CACHE_DIR"])
            stop_all()
