"""YAML read the way kubectl reads it (sigs.k8s.io/yaml over go-yaml v2): dates and timestamps stay the string
written, `!!binary` is its decoded text, `1e0` is a number; and no scalar kubectl accepts ends in a traceback,
for `validate` and for the spec loader alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubetrain.cli.main import cli
from kubetrain.errors import SpecError
from kubetrain.jobspec.load import validate_data
from kubetrain.validate import SchemaStore
from kubetrain.validate.engine import validate_sources
from kubetrain.yamlsrc import parse_documents

CONFIGMAP = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  labels:\n    released: {label}\n"
             "data:\n  {key}: {value}\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("a: 2024-01-01\n", "2024-01-01"), ("a: 2001-12-14t21:59:43.10-05:00\n", "2001-12-14t21:59:43.10-05:00"),
    ("a: 2001-12-14 21:59:43.10 -5\n", "2001-12-14 21:59:43.10 -5"), ("a: !!binary aGVsbG8=\n", "hello"),
    ("a: 1e0\n", 1.0), ("a: -2E+3\n", -2000.0), ("a: 1.5\n", 1.5), ("a: '1e0'\n", "1e0"),
])
def test_scalars_read_as_kubectl_does(text: str, expected: object) -> None:
    assert parse_documents(text, "f.yaml")[0].data["a"] == expected


def test_a_date_label_and_value_validate(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(CONFIGMAP.format(label="2024-01-01", key="RELEASE_DATE", value="2024-01-01"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_replicas_1e0_is_the_number_1() -> None:
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 1e0\n"
            "  selector: {matchLabels: {app: d}}\n  template:\n    metadata: {labels: {app: d}}\n"
            "    spec: {containers: [{name: c, image: 'busybox:1.36'}]}\n")
    assert not validate_sources([("d.yaml", text)], SchemaStore()).errors()


SCALARS = st.one_of(
    st.dates().map(str), st.datetimes().map(lambda d: d.isoformat()), st.datetimes().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str),
    st.from_regex(r"[-+]?[0-9]{1,4}([eE][-+]?[0-9]{1,3})?", fullmatch=True),
    st.sampled_from([".inf", "-.Inf", ".NaN", "~", "null", "yes", "No", "on", "0x1F", "0o17", "010", "1_000",
                     "!!binary aGVsbG8=", "!!binary /w==", "!!binary '!!'", "!!timestamp 2024-01-01", "!!int 1",
                     "!!float 1", "!!str 1", "!!null ''", "<<", "=", "12:30:00", "1:20"]),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12).map(json.dumps),
)


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(label=SCALARS, key=st.sampled_from(["a", "RELEASE_DATE", "x.y"]), value=SCALARS)
def test_no_scalar_ends_in_a_traceback(label: str, key: str, value: str) -> None:
    """validate answers 0 or 1 with a message, and the spec loader raises only SpecError."""
    text = CONFIGMAP.format(label=label, key=key, value=value)
    report = validate_sources([("cm.yaml", text)], SchemaStore())
    assert all(i.message for i in report.issues)
    spec = f"apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {{name: j}}\nspec:\n  image: {value}\n"
    try:
        doc = parse_documents(spec, "kubetrain.yaml")[0]
        validate_data(doc.data, doc.lines, "kubetrain.yaml", doc.plain)
    except SpecError:
        pass
