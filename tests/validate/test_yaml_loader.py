"""The bounded loader over libyaml's events (kubetrain.yamlsrc) reads exactly what the pure-Python one reads:
the same objects, lines and YAML 1.1 plain scalars, and PyYAML's own messages for invalid input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubetrain import yamlsrc
from kubetrain.errors import SpecError
from tests.conftest import in_ci

REPO = Path(__file__).resolve().parent.parent.parent
FILES = sorted(p for d in ("tests/validate", "tests/render/specs", "examples", "manifests")
               for p in (REPO / d).rglob("*.y*ml"))
EDGES = ["args: [3.10, 010, yes]\n", "a: &x {b: 1}\nc: *x\n", "a: 1\n...\n---\nb: 2\n", "a: b: c\n",
         "a: [1, 2\n", "a: 1\na: 2\n", "x: \x07\n", "x: \ud800\n", "b: *nope\n", "%YAML 1.1\n---\na: 1\n",
         "a: !!binary aGk=\n", "k: 'q\n", "- a\n-b: c\n"]


def read(text: str, fast: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(yamlsrc, "_FAST_LOADER", fast)
    try:
        return [(d.data, d.lines, d.plain) for d in yamlsrc.parse_documents(text, "f.yaml")]
    except SpecError as exc:
        return [str(p) for p in exc.problems]


@pytest.mark.parametrize("text", [p.read_text() for p in FILES] + EDGES)
def test_fast_loader_reads_what_the_pure_one_reads(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = yamlsrc._FAST_LOADER
    if fast is None and not in_ci():  # PyYAML's wheels include libyaml; under CI its absence is a failure
        pytest.skip("PyYAML without libyaml: only the pure loader exists")
    assert fast is not None, "PyYAML was built without libyaml (kubetrain's YAML reading is ~10x slower)"
    assert read(text, fast, monkeypatch) == read(text, None, monkeypatch)
