"""No input, however malformed, gets anything but a SpecError with one-line problems out of the loader."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import parse_spec

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10))
JSONISH = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["apiVersion", "kind", "metadata", "spec", "name", "nodes", "image", "command", "env",
                     "volumes", "elastic", "train", "placement", "x"]), inner, max_size=5), max_leaves=20)
VALID: dict[str, Any] = {"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "a"},
                         "spec": {"image": "i:1", "command": ["python", "t.py"]}}


def assert_clean(text: str) -> None:
    try:
        parse_spec(text, "k.yaml")
    except SpecError as exc:
        assert exc.lines(), "a SpecError must carry at least one problem"
        assert all("\n" not in line and line.startswith("k.yaml") for line in exc.lines())


@settings(max_examples=400, deadline=None)
@given(JSONISH)
def test_random_documents(data: Any) -> None:
    assert_clean(yaml.safe_dump(data))


@settings(max_examples=400, deadline=None)
@given(spec=st.dictionaries(st.sampled_from(["nodes", "gpusPerNode", "procsPerNode", "env", "args", "volumes",
                                             "elastic", "resources", "placement", "code", "runPolicy", "train",
                                             "secretEnv", "shmSize", "target", "checkpoint"]), JSONISH, max_size=4))
def test_random_spec_sections(spec: dict[str, Any]) -> None:
    data = {**VALID, "spec": {**VALID["spec"], **spec}}
    assert_clean(yaml.safe_dump(data))


@pytest.mark.parametrize("size", [1e28, "1e28", "10000000000000000000000000000.5", "1e999999Ei", "1e-999999"])
def test_huge_and_tiny_sizes_are_one_line_problems(size: Any) -> None:
    """Found by test_random_spec_sections (shmSize 1e+28): Decimal's `% 1` raised DivisionImpossible past 28
    digits, a traceback instead of a problem."""
    assert_clean(yaml.safe_dump({**VALID, "spec": {**VALID["spec"], "shmSize": size, "resources": {"memory": size}}}))
