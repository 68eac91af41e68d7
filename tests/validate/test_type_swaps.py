"""No input ends the offline `validate` in a traceback: every field of every supported kind (Pod, Deployment,
Job, ConfigMap, Secret, Service, PVC, PyTorchJob, TrainJob, with pod templates that set most pod fields),
swapped for a value of every JSON type — empty and not, null, booleans, an integer past int64 — is judged
(valid or invalid), never crashes a check."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.validate import SchemaStore
from kubetrain.validate.engine import validate_document
from kubetrain.yamlsrc import ParsedDoc
from tests.validate.typeswap import SWAPS, paths, rich_bases, swapped

BASES = rich_bases()
TARGETS = [(kind, path) for kind, base in BASES.items() for path in list(paths(base))[1:]]


@settings(max_examples=600, deadline=None, derandomize=True)
@given(target=st.sampled_from(TARGETS), value=st.sampled_from(SWAPS))
def test_a_swapped_type_is_judged_never_a_traceback(target: tuple[str, tuple[Any, ...]], value: Any,
                                                    schema_store: SchemaStore) -> None:
    kind, path = target
    obj = swapped(BASES[kind], path, value)
    for issue in validate_document(ParsedDoc(obj), "swap.yaml", 1, schema_store):
        assert issue.message  # every problem is a message, not an exception


def test_the_rich_bases_are_valid(schema_store: SchemaStore) -> None:
    """The swaps start from valid objects, so what a swap makes invalid is the swap's doing."""
    for kind, base in BASES.items():
        errors = [i.text() for i in validate_document(ParsedDoc(base), "base.yaml", 1, schema_store)
                  if i.severity == "error"]
        assert errors == [], kind
