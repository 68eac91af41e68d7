"""The offline mode on manifests only the API server judges exactly (tests/validate/kubectl_cases.py): it never
calls a valid one invalid (0 false reds), never ends in a traceback, and where it cannot be sure it warns;
its summary says it is not the API server's verdict, what it left out, and points to --exact."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.validate import SchemaStore, validate_sources
from tests.validate.kubectl_cases import CASES, Case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_offline_verdict(case: Case, schema_store: SchemaStore) -> None:
    report = validate_sources([(f"{case.name}.yaml", case.text)], schema_store)
    verdict = "error" if report.errors() else "warning" if report.warnings() else "valid"
    if case.valid:
        assert not report.errors(), [i.text() for i in report.issues]  # never a false red
    assert verdict == case.offline, [i.text() for i in report.issues]


def test_summary_names_the_verdict_and_what_was_left_out(tmp_path: Path) -> None:
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n"
                        "rules: [{apiGroups: [''], resources: [pods], verbs: [get]}]\n")
    result = CliRunner().invoke(cli, ["validate", str(manifest)])
    assert result.exit_code == 0, result.output
    assert "valid (offline rules, not the API server's verdict)" in result.stderr
    assert "not checked offline: Kubernetes' rules for Role (schema only)" in result.stderr
    assert "`kubetrain validate --exact` gives the API server's verdict" in result.stderr
