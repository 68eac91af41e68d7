"""The offline half of the parity corpus (tests/validate/corpus.py), plus limits and empty input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from kubetrain.validate import SchemaStore, validate_sources
from tests.validate.corpus import ACCEPT, CASES, Case

LATER = "the API server accepts it, but"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_offline_verdict(case: Case, schema_store: SchemaStore) -> None:
    report = validate_sources([("job.yaml", yaml.safe_dump(case.manifest()))], schema_store)
    errors = report.errors()
    if case.path is None:
        assert [e.text() for e in errors] == []
        return
    assert [e.path for e in errors] == [case.path], [e.text() for e in errors]
    if case.server == ACCEPT:  # refused offline only by a documented later-stage rule, which says so
        assert LATER in errors[0].message


def test_every_rule_kind_has_cases_on_both_sides() -> None:
    assert {c.server for c in CASES if c.path is None} == {ACCEPT}
    assert {c.base for c in CASES if c.path is None} == {c.base for c in CASES}


@pytest.mark.parametrize("text", ["", "---\n", "# only a comment\n", "---\n---\n"])
def test_empty_input_is_an_error(text: str, schema_store: SchemaStore) -> None:
    report = validate_sources([("empty.yaml", text)], schema_store)
    assert report.documents == 0
    assert [i.message for i in report.errors()] == ["no Kubernetes objects (empty, only comments or only ---)"]


def _bomb(levels: int = 9) -> str:
    text, previous = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n', "a"
    for name in "bcdefghijklmnop"[:levels - 1]:
        text += f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
        previous = name
    return text


@pytest.mark.parametrize(("text", "message"), [
    (_bomb(), "input limit: more than 200000 nodes once aliases are expanded"),
    ("x: " + "[" * 500 + "]" * 500 + "\n", "input limit: nested deeper than 100 levels"),
    ("a: &a 1\nb: [" + ", ".join(["*a"] * 1001) + "]\n", "input limit: more than 1000 aliases (*name)"),
    ("a: '" + "x" * (3 * 2**20 + 10) + "'\n", "input limit: a document of 3.0 MiB; the limit is 3 MiB (the "
     "apiserver's request limit)"),
], ids=["alias-bomb", "deep", "aliases", "document-size"])
def test_hostile_yaml_fails_fast_in_one_line(text: str, message: str, schema_store: SchemaStore) -> None:
    started = time.monotonic()
    report = validate_sources([("evil.yaml", text)], schema_store)
    assert [i.message for i in report.errors()] == [message]
    assert time.monotonic() - started < 60  # bounded: unbounded would take hours (or exhaust memory)


def test_objects_etcd_cannot_store(schema_store: SchemaStore) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "x" * (2**20 + 1)}}
    report = validate_sources([("cm.yaml", yaml.safe_dump(cm))], schema_store)
    assert [(i.path, i.message) for i in report.errors()] == [
        ("data", "data and binaryData hold 1048578 bytes; a ConfigMap holds at most 1048576")]
    cm["data"] = {"a": "x" * (1600 * 1024)}
    report = validate_sources([("cm.yaml", yaml.safe_dump(cm))], schema_store)
    assert [i.message for i in report.errors()] == ["the object is 1.56 MiB as JSON; etcd stores at most 1.5 MiB "
                                                    "per object"]


WORKFLOW = "name: ci\non: [push]\njobs: {test: {runs-on: ubuntu-latest, steps: [{run: make test}]}}\n"
HYDRA = "defaults:\n  - model: resnet\ntrainer:\n  max_epochs: 3\n"
SPEC = ("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\n"
        "spec:\n  image: repo/img:1\n  command: [python, train.py]\n  args: [3.10]\n")


def test_pre_commit_mode_skips_foreign_yaml_and_checks_specs_with_the_loader(schema_store: SchemaStore) -> None:
    sources = [(".github/workflows/ci.yaml", WORKFLOW), ("conf/config.yaml", HYDRA), ("empty.yaml", ""),
               ("kubetrain.yaml", SPEC), ("bad.yaml", "a: [1\n")]
    report = validate_sources(sources, schema_store, skip_foreign=True)
    assert [(i.source, i.line, i.path, i.message) for i in report.errors()] == [
        ("kubetrain.yaml", 7, "spec.args[0]", 'YAML reads the unquoted 3.10 as the number 3.1; quote it: "3.10"')]
    assert report.documents == 1
    strict = validate_sources(sources[:2], schema_store)
    assert [i.message for i in strict.errors()] == ["not a Kubernetes object: apiVersion and kind are required"] * 2
    fixed = validate_sources([("kubetrain.yaml", SPEC.replace("[3.10]", "['3.10']"))], schema_store)
    assert fixed.errors() == []


def test_the_hook_uses_pre_commit_mode() -> None:
    hooks = yaml.safe_load((Path(__file__).parents[2] / ".pre-commit-hooks.yaml").read_text())
    assert {h["id"]: h["entry"] for h in hooks}["kubetrain-validate"] == "kubetrain validate --skip-non-kubernetes"
