"""The spec documents every field, and docs/spec.md is generated from it."""

from __future__ import annotations

from pathlib import Path

from kubetrain.jobspec.reference import reference_markdown, undocumented_fields

DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def test_every_field_is_documented() -> None:
    assert undocumented_fields() == []


def test_reference_doc_is_current() -> None:
    assert DOC.read_text() == reference_markdown(), "run: python -m kubetrain.jobspec.reference > docs/spec.md"
