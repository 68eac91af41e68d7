"""Nothing silently changed: YAML 1.1 scalars in string fields, booleans in number fields, quantities that
the cluster would reject or misread, and hostile input sizes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import load_spec, parse_spec
from tests.jobspec.test_load import VALID
from tests.validate.test_rules import _bomb


def problems(extra: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(VALID + extra, "k.yaml")
    return info.value.lines()


def test_yaml_11_numbers_in_strings_say_how_to_quote() -> None:
    assert problems("  args: [3.10, 010, '3.10', 3]\n  env: {A: yes, B: 0x10, C: 7}\n") == [
        'k.yaml:9: spec.args[0]: YAML reads the unquoted 3.10 as the number 3.1; quote it: "3.10"',
        'k.yaml:9: spec.args[1]: YAML reads the unquoted 010 as the number 8; quote it: "010"',
        "k.yaml:10: spec.env.A: must be a string: YAML reads the unquoted yes as True; quote it: \"yes\"",
        'k.yaml:10: spec.env.B: YAML reads the unquoted 0x10 as the number 16; quote it: "0x10"',
    ]
    job = parse_spec(VALID + "  args: ['3.10', 3, 1.5]\n  env: {C: 7}\n")
    assert job.spec.args == ["3.10", "3", "1.5"] and job.spec.env == {"C": "7"}


def test_booleans_are_not_numbers() -> None:
    assert problems("  procsPerNode: true\n") == ["k.yaml:9: spec.procsPerNode: must be a number, not the boolean true"]
    assert problems("  elastic: {maxNodes: yes}\n") == [
        "k.yaml:9: spec.elastic.maxNodes: must be a number, not the boolean true"]


@pytest.mark.parametrize(("resources", "message"), [
    ("{memory: -1Gi}", "spec.resources.memory: '-1Gi' must not be negative"),
    ("{cpu: '-1'}", "spec.resources.cpu: '-1' must not be negative"),
    ("{memory: 500m}", "spec.resources.memory: '500m' is a fraction of a byte ('m' means milli); did you mean "
     "'500mi'?"),
    ("{ephemeralStorage: '1.5'}", "spec.resources.ephemeralStorage: '1.5' is a fraction of a byte; use whole bytes "
     "or a unit such as Mi or Gi"),
])
def test_quantities_the_cluster_rejects_or_misreads(resources: str, message: str) -> None:
    assert problems(f"  resources: {resources}\n") == [f"k.yaml:9: {message}"]


def test_image_reference_is_checked() -> None:
    with pytest.raises(SpecError, match="'has space:1' is not an image reference"):
        parse_spec(VALID.replace("ghcr.io/acme/digits:1.0", "'has space:1'"), "k.yaml")


def test_hostile_spec_files_fail_fast(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(VALID + "  x: 1\n" + "".join(f"  {line}\n" for line in _bomb().splitlines()))
    started = time.monotonic()
    with pytest.raises(SpecError, match="input limit: more than 200000 nodes"):
        load_spec(str(bomb))
    assert time.monotonic() - started < 60
    deep = tmp_path / "deep.yaml"
    deep.write_text(VALID + "  args: " + "[" * 600 + "]" * 600 + "\n")
    with pytest.raises(SpecError, match=r"deep.yaml:9: input limit: nested deeper than 100 levels"):
        load_spec(str(deep))
    big = tmp_path / "big.yaml"
    big.write_text(VALID + "  args: ['" + "x" * (50 * 2**20) + "']\n")
    with pytest.raises(SpecError, match=r"big.yaml: input limit: larger than 1 MiB"):
        load_spec(str(big))


@pytest.mark.parametrize("redirect", ["<&-", "</dev/null"], ids=["closed", "empty"])
def test_stdin_closed_or_empty_is_a_one_line_usage_error(redirect: str) -> None:
    command = f'exec "{sys.executable}" -m kubetrain validate - {redirect}'
    result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert ("stdin is closed" if redirect == "<&-" else "no documents to validate") in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize(("checker", "value"), [
    ("image_error", "null\n"), ("image_error", "ghcr.io/acme/digits:1.0\n"), ("label_value_error", "a\n"),
])
def test_a_trailing_newline_is_not_a_valid_name(checker: str, value: str) -> None:
    # Python's `$` also matches before a final newline: the patterns must match the whole value.
    from kubetrain.rules import names

    assert getattr(names, checker)(value) is not None
    assert getattr(names, checker)(value.rstrip("\n")) is None
