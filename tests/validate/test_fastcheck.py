"""The compiled schema check (kubetrain/validate/fastcheck.py) never passes what jsonschema fails.

`validate` trusts the compiled check's "valid" and asks jsonschema only about the rest, so the one property
that keeps verdicts and messages unchanged is: fast-valid implies jsonschema-valid. Checked on the whole
parity corpus, every test manifest, every rendered example spec, and values where Rust and Python differ.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.cli.common import render_loaded
from kubetrain.jobspec.load import load_spec
from kubetrain.validate import SchemaStore
from tests.validate.corpus import CASES, MANIFESTS

SPECS = Path(__file__).resolve().parent.parent / "render" / "specs"


def _corpus() -> Iterator[tuple[str, dict[str, Any]]]:
    for case in CASES:
        yield case.id, case.manifest()
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(doc, dict):
                yield f"{path.name}#{index}", doc
    for path in sorted(SPECS.glob("*.yaml")):
        for obj in render_loaded(load_spec(str(path))):
            yield f"rendered {path.name} {obj['kind']}", obj


def _schema_errors(store: SchemaStore, obj: dict[str, Any]) -> list[str]:
    found = store.validator(obj["apiVersion"], obj["kind"])
    assert found is not None, f"no schema for {obj['kind']}"
    return [error.message for error in found[0].iter_errors(obj)]


def _edge_cases(base: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Values where Rust and Python could disagree: each one must not pass the compiled check if jsonschema
    fails it (and the ones jsonschema fails are asserted to be failures)."""
    def container(job: dict[str, Any]) -> dict[str, Any]:
        return job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]

    edits: dict[str, Any] = {
        "pattern-trailing-newline": lambda j: container(j).update(resources={"limits": {"memory": "1Gi\n"}}),
        "pattern-unicode-digit": lambda j: container(j).update(resources={"limits": {"cpu": "\u0663"}}),
        "boolean-replicas": lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=True),
        "float-replicas": lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=1.5),
        "integral-float-replicas": lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=1.0),
        "huge-integer": lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2**70),
        "nan": lambda j: container(j).update(resources={"limits": {"cpu": float("nan")}}),
        "non-string-key": lambda j: container(j).update(resources={"limits": {1: "2"}}),
        "duplicate-ports": lambda j: container(j).update(ports=[{"containerPort": 1, "protocol": "TCP"}] * 2),
        "unknown-field": lambda j: j["spec"].update(unknownField=1),
        "null-string": lambda j: container(j).update(image=None),
    }
    for name, edit in edits.items():
        job = copy.deepcopy(base)
        edit(job)
        yield name, job


def test_fast_valid_implies_jsonschema_valid(schema_store: SchemaStore) -> None:
    passed = failed = 0
    for name, obj in _corpus():
        if (obj["apiVersion"], obj["kind"]) not in schema_store.crds:
            continue
        errors = _schema_errors(schema_store, obj)
        if schema_store.passes(obj):
            assert errors == [], f"{name}: the compiled check passed it, jsonschema says {errors}"
            passed += 1
        else:
            failed += 1
    # the fast path is really taken (a missing jsonschema-rs would make every document "not known valid")
    assert passed >= 10 and failed >= 1, (passed, failed)


def test_edge_values_are_never_passed_wrongly(schema_store: SchemaStore) -> None:
    base = yaml.safe_load((MANIFESTS / "simple.yaml").read_text())
    assert schema_store.passes(base)
    for name, obj in _edge_cases(base):
        errors = _schema_errors(schema_store, obj)
        if schema_store.passes(obj):
            assert errors == [], f"{name}: the compiled check passed it, jsonschema says {errors}"
        if name in ("boolean-replicas", "float-replicas", "unknown-field", "duplicate-ports", "null-string"):
            assert errors, name
            assert not schema_store.passes(obj), name


@pytest.mark.parametrize("bad_pattern", ["(?P<x>a)(?P=x)"])
def test_a_schema_rust_cannot_compile_has_no_fast_check(bad_pattern: str) -> None:
    from kubetrain.validate.fastcheck import compile_check

    assert compile_check({"type": "string", "pattern": bad_pattern}) is None
    check = compile_check({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$"}}})
    assert check is not None and check({"a": "aa"}) and not check({"a": "b"})


def test_validating_a_valid_job_does_not_import_jsonschema(schema_store: SchemaStore, tmp_path: Path) -> None:
    """jsonschema is imported only to explain a failing document (the compiled check passes valid ones)."""
    import subprocess
    import sys

    from tests.conftest import PYTORCHJOB_CRD

    valid, broken = tmp_path / "valid.yaml", tmp_path / "broken.yaml"
    valid.write_text((MANIFESTS / "simple.yaml").read_text())
    broken.write_text((MANIFESTS / "simple.yaml").read_text() + "unknownTopLevelField: 1\n")
    code = ("import sys; from kubetrain.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    print(f'EXIT={exc.code}', file=sys.stderr)\n"
            "print('JSONSCHEMA=' + str('jsonschema' in sys.modules), file=sys.stderr)")
    for path, exit_code, imported in ((valid, "0", "False"), (broken, "1", "True")):
        result = subprocess.run([sys.executable, "-c", code, "validate", "--schema", str(PYTORCHJOB_CRD), str(path)],
                                capture_output=True, text=True, timeout=120, check=False)
        assert f"EXIT={exit_code}\n" in result.stderr, result.stderr[-2000:]
        assert f"JSONSCHEMA={imported}" in result.stderr, result.stderr[-2000:]
