"""The pod's reader of KUBETRAIN_CONFIG (kubetrain.runtime.settings) against the spec's own models: the same
fields, defaults, choices and bounds, the renderer's JSON read back unchanged, and one line naming the field
for a hand-written config that does not fit."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel

from kubetrain.jobspec import sections
from kubetrain.runtime import settings
from kubetrain.runtime.config import RuntimeConfigError, load_config

PAIRS = [(settings.Train, sections.Train), (settings.Checkpoint, sections.Checkpoint),
         (settings.Divergence, sections.Divergence), (settings.DDP, sections.DDP), (settings.FSDP, sections.FSDP),
         (settings.Profile, sections.Profile)]


def _bounds(annotation: Any, metadata: list[Any]) -> dict[str, float]:
    """ge/gt of a pydantic field, on it or on its list's items (list[Annotated[int, Field(ge=0)]])."""
    found: dict[str, float] = {}
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            found["ge"] = m.ge
        elif isinstance(m, annotated_types.Gt):
            found["gt"] = m.gt
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated:
            found |= _bounds(None, [m for a in typing.get_args(arg)[1:] for m in getattr(a, "metadata", [a])])
        elif typing.get_args(arg):
            found |= _bounds(arg, [])
    return found


def _literal(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()


@pytest.mark.parametrize(("ours", "spec"), PAIRS, ids=[spec.__name__ for _, spec in PAIRS])
def test_the_runtime_settings_mirror_the_spec_sections(ours: type, spec: type[BaseModel]) -> None:
    fields = {f.name: f for f in dataclasses.fields(ours)}
    assert sorted(fields) == sorted(spec.model_fields)
    hints = typing.get_type_hints(ours)
    for name, info in spec.model_fields.items():
        mine = fields[name]
        spec_default = info.get_default(call_default_factory=True)
        my_default = (mine.default_factory() if mine.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                      else mine.default)
        if dataclasses.is_dataclass(my_default):
            assert dataclasses.asdict(my_default) == spec_default.model_dump(), name  # type: ignore[arg-type]
        elif info.is_required():
            assert my_default is dataclasses.MISSING, name
        else:
            assert my_default == spec_default, name
        assert _literal(hints[name]) == _literal(info.annotation), name
        assert dict(mine.metadata) == _bounds(info.annotation, info.metadata), name


def test_the_renderers_json_reads_back_unchanged() -> None:
    train = sections.Train(model="m.a:b", dataset="m.a:c", lr=0.5, gradClip=1.0, precision="bf16", strategy="fsdp",
                           ddp=sections.DDP(bucketCapMb=4), fsdp=sections.FSDP(wrapClasses=["Block"], metaInit=True),
                           profile=sections.Profile(dir="/p", ranks=[0, 3]))
    checkpoint = sections.Checkpoint(dir="s3://bucket/run", everySteps=5)
    divergence = sections.Divergence(policy="skip", maxSkippedSteps=2)
    config = {"train": train.model_dump(mode="json", by_alias=True),
              "checkpoint": checkpoint.model_dump(mode="json", by_alias=True, exclude={"ephemeral"}),
              "divergence": divergence.model_dump(mode="json", by_alias=True)}
    read = load_config({"KUBETRAIN_CONFIG": json.dumps(config)})
    assert dataclasses.asdict(read.train) == train.model_dump()  # type: ignore[arg-type]
    assert dataclasses.asdict(read.checkpoint) == checkpoint.model_dump()
    assert dataclasses.asdict(read.divergence) == divergence.model_dump()
    assert isinstance(read.train.lr, float) and read.train.fsdp.wrapClasses == ["Block"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("train", "message"), [
    ({"model": "m:a"}, "spec.train.dataset: required"),
    ({"model": "m:a", "dataset": "m:b", "batchsize": 8}, "spec.train.batchsize: unknown field"),
    ({"model": "m:a", "dataset": "m:b", "batchSize": "8"}, "spec.train.batchSize: expected an integer, got a string"),
    ({"model": "m:a", "dataset": "m:b", "epochs": True}, "spec.train.epochs: expected an integer, got a boolean"),
    ({"model": "m:a", "dataset": "m:b", "batchSize": 0}, "spec.train.batchSize: must be >= 1, got 0"),
    ({"model": "m:a", "dataset": "m:b", "lr": 0}, "spec.train.lr: must be > 0, got 0"),
    ({"model": "m:a", "dataset": "m:b", "precision": "fp8"}, "spec.train.precision: 'fp8' is not one of 'fp32'"),
    ({"model": "m:a", "dataset": "m:b", "ddp": []}, "spec.train.ddp: expected an object, got a list"),
    ({"model": "m:a", "dataset": "m:b", "profile": {"dir": "/p", "ranks": [-1]}},
     "spec.train.profile.ranks[0]: must be >= 0, got -1"),
])
def test_a_config_that_does_not_fit_is_one_line_naming_the_field(train: dict[str, Any], message: str) -> None:
    with pytest.raises(RuntimeConfigError) as raised:
        load_config({"KUBETRAIN_CONFIG": json.dumps({"train": train, "checkpoint": {}})})
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)
    assert raised.value.exit_code == 2


def test_the_trainer_takes_the_specs_own_models_as_they_are() -> None:
    spec = sections.Train(model="m:a", dataset="m:b", epochs=3)
    assert settings.as_settings(settings.Train, spec, "spec.train") == settings.Train(model="m:a", dataset="m:b",
                                                                                      epochs=3)
    with pytest.raises(RuntimeConfigError, match=r"^spec\.train: expected kubetrain\.runtime\.settings\.Train"):
        settings.as_settings(settings.Train, {"model": "m:a"}, "spec.train")
