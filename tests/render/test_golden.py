"""Golden files: each spec under specs/ renders to exactly its golden manifest, which validates clean.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/render/test_golden.py`, then review
the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubetrain.cli.common import render_loaded
from kubetrain.errors import SpecError
from kubetrain.jobspec.checks import spec_problems
from kubetrain.jobspec.load import load_spec
from kubetrain.render.yamlout import dump_yaml
from kubetrain.validate import SchemaStore, validate_objects

HERE = Path(__file__).parent
SPECS = sorted((HERE / "specs").glob("*.yaml"))
REPO = HERE.parent.parent
EXAMPLES = sorted(REPO.glob("examples/**/kubetrain*.yaml"))


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_render_matches_golden(spec: Path) -> None:
    rendered = dump_yaml(render_loaded(load_spec(str(spec))))
    golden = HERE / "golden" / spec.name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.is_file(), f"no golden file for {spec.name}; run with UPDATE_GOLDEN=1"
    assert rendered == golden.read_text()


@pytest.mark.parametrize("spec", SPECS + EXAMPLES, ids=[s.stem for s in SPECS] + [str(e.relative_to(REPO))
                                                                                   for e in EXAMPLES])
@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_rendered_specs_validate_clean(spec: Path, target: str, schema_store: SchemaStore) -> None:
    loaded = load_spec(str(spec))
    if spec_problems(loaded.job, target):
        with pytest.raises(SpecError, match=f"not supported with target {target}"):
            render_loaded(loaded, target=target)
        return
    report = validate_objects(render_loaded(loaded, target=target), schema_store)
    assert [i.text() for i in report.issues] == []


def test_examples_exist() -> None:
    assert EXAMPLES, "the built-in example (examples/*/kubetrain.yaml) is missing"
