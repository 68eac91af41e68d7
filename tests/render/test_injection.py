"""Injection safety, proved by property: nothing a user writes changes the manifest's structure.

Arbitrary strings (newlines, quotes, `#`, `---`, anchors, aliases, tags, `{{ }}`, `{% %}`, unicode line
separators...) go into names, env values, args, labels, annotations and paths. The rendered YAML is parsed
back: each value must come out as the same string in the same place, and the document's shape (keys, list
lengths) must equal that of a spec with harmless placeholder values. Or the spec is rejected (SpecError)
because Kubernetes would reject the value anyway.
"""

from __future__ import annotations

import copy
import json
import posixpath
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubetrain.errors import SpecError
from kubetrain.jobspec.load import validate_data
from kubetrain.render import RenderOptions, render_job
from kubetrain.render.yamlout import dump_json, dump_yaml

NASTY = ["\n", "\r\n", "'", '"', ": ", " #", "---", "...", "&a", "*a", "!!python/object", "{{ 7*7 }}",
         "{% raw %}", "{#", "\\", "\t", "\u2028", "\x85", "\ufeff", "- ", "? ", "|", ">", "%TAG", "@", "`",
         "\U0001f600", "null", "true", "0x1F", "1e3", "~"]
# Any text, biased towards YAML and jinja syntax. Surrogates are excluded (not encodable as UTF-8 at all).
TEXT = st.lists(st.one_of(st.sampled_from(NASTY), st.text(st.characters(exclude_categories=["Cs"]),
                                                          max_size=8)), max_size=6).map("".join)
LABEL_VALUE = st.from_regex(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]{0,20})?[A-Za-z0-9])?\Z")
NAME = st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z")
PATH = st.lists(st.from_regex(r"\A[A-Za-z0-9_.~ #{}%&*!-]{1,8}\Z").filter(lambda s: s not in {".", ".."}),
                min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts))


def spec_dict(name: str, env: dict[str, str], args: list[str], labels: dict[str, str],
              annotations: dict[str, str], mount: str, image: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"image": image, "command": command, "args": args, "nodes": 2, "gpusPerNode": 1,
                 "env": env, "volumes": [{"name": "data", "claim": "data", "mountPath": mount}]},
    }


def shape(obj: Any) -> Any:
    """The document's structure with every scalar replaced by its type."""
    if isinstance(obj, dict):
        return {key: shape(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [shape(value) for value in obj]
    return type(obj).__name__


def placeholders(data: dict[str, Any]) -> dict[str, Any]:
    """The same spec with every user string replaced by a harmless one (keys of maps kept)."""
    safe = copy.deepcopy(data)
    safe["spec"]["env"] = dict.fromkeys(safe["spec"]["env"], "x")
    safe["spec"]["args"] = ["x"] * len(safe["spec"]["args"])
    safe["spec"]["command"] = ["x"] * len(safe["spec"]["command"])
    safe["metadata"]["annotations"] = dict.fromkeys(safe["metadata"]["annotations"], "x")
    safe["spec"]["image"] = "x"
    safe["spec"]["volumes"][0]["mountPath"] = "/x"
    return safe


def render_back(data: dict[str, Any], target: str) -> list[dict[str, Any]]:
    job = validate_data(data, {}, "prop.yaml")
    objects = render_job(job, RenderOptions(), target=target)
    text = dump_yaml(objects)
    back = list(yaml.safe_load_all(text))
    assert back == objects  # the YAML text reads back as exactly what was rendered
    assert json.loads(dump_json(objects)) == objects[0]
    return back


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAME, env=st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,10}\Z"), TEXT, max_size=4),
       args=st.lists(TEXT, max_size=5), labels=st.dictionaries(NAME, LABEL_VALUE, max_size=3),
       annotations=st.dictionaries(NAME, TEXT, max_size=3), mount=PATH, image=TEXT.filter(bool),
       command=st.lists(TEXT, min_size=1, max_size=3), target=st.sampled_from(["pytorchjob", "trainjob"]))
def test_user_strings_never_change_structure(name: str, env: dict[str, str], args: list[str],
                                             labels: dict[str, str], annotations: dict[str, str], mount: str,
                                             image: str, command: list[str], target: str) -> None:
    data = spec_dict(name, env, args, labels, annotations, mount, image, command)
    try:
        back = render_back(data, target)
    except SpecError:
        return  # rejected with a clear error: allowed (checked for reasons in test_rejections)
    baseline = render_back(placeholders(data), target)
    assert [shape(o) for o in back] == [shape(o) for o in baseline]
    job_obj = back[-1]
    container_env = _env_of(job_obj, target)
    for key, value in env.items():
        assert container_env[key] == value
    if args:
        assert _args_of(job_obj, target)[-len(args):] == args
    assert {k: job_obj["metadata"]["annotations"][k] for k in annotations} == annotations
    assert {k: job_obj["metadata"]["labels"][k] for k in labels} == labels
    assert _image_of(job_obj, target) == image
    assert posixpath.normpath(mount) in {m["mountPath"] for m in _mounts_of(job_obj, target)}


def _pod(job_obj: dict[str, Any], target: str) -> dict[str, Any]:
    if target == "trainjob":
        patch = job_obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        return patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return job_obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]  # type: ignore[no-any-return]


def _env_of(job_obj: dict[str, Any], target: str) -> dict[str, str]:
    items = (job_obj["spec"]["trainer"]["env"] if target == "trainjob"
             else _pod(job_obj, target)["containers"][0]["env"])
    return {item["name"]: item.get("value") for item in items}


def _args_of(job_obj: dict[str, Any], target: str) -> list[str]:
    if target == "trainjob":
        return job_obj["spec"]["trainer"]["args"]  # type: ignore[no-any-return]
    return _pod(job_obj, target)["containers"][0]["args"]  # type: ignore[no-any-return]


def _image_of(job_obj: dict[str, Any], target: str) -> str:
    if target == "trainjob":
        return job_obj["spec"]["trainer"]["image"]  # type: ignore[no-any-return]
    return _pod(job_obj, target)["containers"][0]["image"]  # type: ignore[no-any-return]


def _mounts_of(job_obj: dict[str, Any], target: str) -> list[dict[str, str]]:
    return _pod(job_obj, target)["containers"][0]["volumeMounts"]  # type: ignore[no-any-return]


@settings(max_examples=500, deadline=None)
@given(name=TEXT, label=TEXT)
def test_invalid_names_and_labels_are_rejected_not_rendered(name: str, label: str) -> None:
    data = spec_dict("ok", {}, [], {"team": label}, {}, "/data", "img:1", ["python"])
    data["metadata"]["name"] = name
    try:
        objects = render_job(validate_data(data, {}, "prop.yaml"))
    except SpecError as exc:
        assert all(line.startswith("prop.yaml") for line in exc.lines())
        return
    assert objects[-1]["metadata"]["name"] == name
    assert objects[-1]["metadata"]["labels"]["team"] == label
