"""Loading kubetrain.yaml: every problem reported at once, with file:line and field path; never a traceback."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import load_spec, parse_spec

VALID = textwrap.dedent("""\
    apiVersion: kubetrain.dev/v1alpha1
    kind: TrainingJob
    metadata: {name: digits-ddp, namespace: ml}
    spec:
      image: ghcr.io/acme/digits:1.0
      command: [python, -m, train]
      nodes: 2
      gpusPerNode: 1
    """)


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "kubetrain.yaml")
    return info.value.lines()


def test_valid_spec_gets_documented_defaults() -> None:
    job = parse_spec(VALID)
    assert job.spec.target == "pytorchjob"
    assert job.spec.procs_per_node == 1  # defaults to gpusPerNode
    assert job.spec.runPolicy.ttlSecondsAfterFinished == 86400
    assert parse_spec(VALID.replace("gpusPerNode: 1", "gpusPerNode: 0")).spec.procs_per_node == 1
    assert parse_spec(VALID.replace("gpusPerNode: 1", "gpusPerNode: 4")).spec.procs_per_node == 4


def test_all_problems_reported_together_with_lines() -> None:
    text = VALID.replace("nodes: 2", "nodes: 0\n  resources: {cpu: 8, mem: 1Gi}\n  gpusPerNode: -1")
    text = text.replace("  gpusPerNode: 1\n", "")
    assert problems(text) == [
        "kubetrain.yaml:7: spec.nodes: must be >= 1",
        "kubetrain.yaml:8: spec.resources.mem: unknown field; did you mean 'memory'?",
        "kubetrain.yaml:9: spec.gpusPerNode: must be >= 0",
    ]


def test_a_field_error_does_not_hide_the_rules_of_the_whole_spec() -> None:
    """`nodes: 0` used to stop the checks there: the trainjob-only runPolicy field came out only once it was fixed."""
    text = VALID.replace("nodes: 2", "nodes: 0\n  target: trainjob\n  runPolicy: {backoffLimit: 2}")
    assert problems(text) == [
        "kubetrain.yaml:7: spec.nodes: must be >= 1",
        "kubetrain.yaml:9: spec.runPolicy.backoffLimit: not supported with target trainjob: a TrainJob has no such "
        "setting (Trainer v2.3 maps only activeDeadlineSeconds); remove it or use target pytorchjob",
    ]


@pytest.mark.parametrize(("text", "expected"), [
    ("", "kubetrain.yaml:1: expected a mapping with apiVersion, kind, metadata and spec; found an empty file"),
    ("- a\n- b\n", "kubetrain.yaml:1: expected a mapping with apiVersion, kind, metadata and spec; found a list"),
    ("just text", "kubetrain.yaml:1: expected a mapping with apiVersion, kind, metadata and spec; found a string"),
    ("a: [1\n", "kubetrain.yaml:2: invalid YAML: expected ',' or ']', but got '<stream end>'"),
    ("a: 1\na: 2\n", "kubetrain.yaml:2: a: duplicate key"),
    ("a: 1\n---\nb: 2\n", "kubetrain.yaml:3: expected one YAML document, found several (---)"),
    ("\tkey: value", "kubetrain.yaml:1: invalid YAML: found character '\\t' that cannot start any token"),
])
def test_malformed_files(text: str, expected: str) -> None:
    assert problems(text) == [expected]


def test_wrong_shapes_name_the_field() -> None:
    text = VALID.replace("nodes: 2", "nodes: two\n  env: [A, B]\n  volumes: {a: 1}")
    assert problems(text) == [
        "kubetrain.yaml:7: spec.nodes: must be a valid integer, unable to parse string as an integer",
        "kubetrain.yaml:8: spec.env: must be a mapping, not list",
        "kubetrain.yaml:9: spec.volumes: must be a list, not mapping",
    ]


def test_runpolicy_at_wrong_level_gets_a_hint() -> None:
    text = VALID + "  elastic: {maxNodes: 2, runPolicy: {backoffLimit: 1}}\n"
    assert problems(text) == ["kubetrain.yaml:9: spec.elastic.runPolicy: unknown field; runPolicy belongs "
                              "directly under spec"]


def test_names_follow_kubernetes_rules() -> None:
    assert problems(VALID.replace("digits-ddp", "Digits_DDP"))[0].startswith(
        "kubetrain.yaml:3: metadata.name: 'Digits_DDP' must consist of lower-case letters")
    assert problems(VALID.replace("digits-ddp", "1digits"))[0].endswith(
        "start with a lower-case letter and end with one")
    long_name = "a" * 55
    assert problems(VALID.replace("digits-ddp", long_name).replace("nodes: 2", "nodes: 20")) == [
        f"kubetrain.yaml:3: metadata.name: too long: the operator would name a pod '{long_name}-worker-19', "
        "over 63 characters"]


def test_label_values_and_keys_are_checked() -> None:
    text = VALID.replace("namespace: ml}", "namespace: ml, labels: {team: 'a b', 'bad key!': x}}")
    lines = problems(text)
    assert len(lines) == 2
    assert all(line.startswith("kubetrain.yaml:3: metadata.labels") for line in lines)


def test_cross_field_checks() -> None:
    text = VALID.replace("command: [python, -m, train]", "target: trainjob") + (
        "  elastic: {minNodes: 1, maxNodes: 4}\n"
        "  env: {HF_TOKEN: x}\n"
        "  secretEnv: [{name: HF_TOKEN, secret: hf, key: token}]\n"
        "  volumes:\n"
        "    - {name: data, claim: a, mountPath: /data}\n"
        "    - {name: data, claim: b, mountPath: /data/}\n"
        "    - {name: dshm, claim: c, mountPath: /dev/shm}\n")
    assert problems(text) == [
        "kubetrain.yaml:4: spec.command: set either `command` (your program) or `train` (the Trainer API)",
        "kubetrain.yaml:9: spec.elastic: not supported with target trainjob: Kubeflow Trainer v2 has no elastic "
        "training; use target pytorchjob or remove `elastic`",
        "kubetrain.yaml:11: spec.secretEnv[0].name: HF_TOKEN is also set in spec.env",
        "kubetrain.yaml:13: spec.volumes[0].mountPath: /data is mounted more than once",
        "kubetrain.yaml:13: spec.volumes[0].name: 'data' is used more than once",
        "kubetrain.yaml:14: spec.volumes[1].mountPath: /data is mounted more than once",
        "kubetrain.yaml:14: spec.volumes[1].name: 'data' is used more than once",
        "kubetrain.yaml:15: spec.volumes[2].mountPath: /dev/shm is kubetrain's shared-memory mount; set "
        "`shmSize` instead",
        "kubetrain.yaml:15: spec.volumes[2].name: 'dshm' is reserved by kubetrain",
    ]


def test_numbers_in_args_and_env_become_strings() -> None:
    job = parse_spec(VALID + "  args: [--epochs, 3]\n  env: {SEED: 7}\n")
    assert job.spec.args == ["--epochs", "3"]
    assert job.spec.env == {"SEED": "7"}


def test_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"missing.yaml: no such file \(create one with `kubetrain init`\)"):
        load_spec(str(tmp_path / "missing.yaml"))
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(bytes(range(256)))
    with pytest.raises(SpecError, match=r"garbage.yaml: not UTF-8 text \(byte 128\)"):
        load_spec(str(garbage))
    good = tmp_path / "kubetrain.yaml"
    good.write_text(VALID)
    loaded = load_spec(str(good))
    assert loaded.base_dir == tmp_path.resolve()
    assert loaded.job.metadata.name == "digits-ddp"
