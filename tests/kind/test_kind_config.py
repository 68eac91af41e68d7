"""The rendered kind config (pure) and the --name / --gpus parsing."""

from __future__ import annotations

import pytest
import yaml

from kubetrain.errors import UsageError
from kubetrain.kind.config import check_name, parse_gpus, render_config


def test_all_gpus_one_labelled_worker() -> None:
    assert yaml.safe_load(render_config("kubetrain", None)) == {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": "kubetrain",
        "nodes": [
            {"role": "control-plane"},
            {"role": "worker", "labels": {"nvidia.com/gpu.present": "true"},
             "extraMounts": [{"hostPath": "/dev/null",
                              "containerPath": "/var/run/nvidia-container-devices/all"}]},
        ],
    }


def test_one_worker_per_listed_gpu_and_node_image() -> None:
    config = yaml.safe_load(render_config("dev", [0, 2], node_image="kindest/node:v1.36.0"))
    assert config["nodes"] == [
        {"role": "control-plane", "image": "kindest/node:v1.36.0"},
        {"role": "worker", "image": "kindest/node:v1.36.0", "labels": {"nvidia.com/gpu.present": "true"},
         "extraMounts": [{"hostPath": "/dev/null", "containerPath": "/var/run/nvidia-container-devices/0"}]},
        {"role": "worker", "image": "kindest/node:v1.36.0", "labels": {"nvidia.com/gpu.present": "true"},
         "extraMounts": [{"hostPath": "/dev/null", "containerPath": "/var/run/nvidia-container-devices/2"}]},
    ]


def test_cpu_only_has_no_gpu_mounts_or_labels() -> None:
    config = yaml.safe_load(render_config("ci", None, cpu_only=True))
    assert config["nodes"] == [{"role": "control-plane"}]


def test_label_value_is_a_yaml_string() -> None:
    assert 'nvidia.com/gpu.present: "true"' in render_config("k", None) or \
        "nvidia.com/gpu.present: 'true'" in render_config("k", None)


@pytest.mark.parametrize(("value", "parsed"), [("all", None), ("0", [0]), ("0,1", [0, 1]), ("3,1", [3, 1])])
def test_parse_gpus(value: str, parsed: list[int] | None) -> None:
    assert parse_gpus(value) == parsed


@pytest.mark.parametrize("value", ["", "x", "0,0", "-1", "0,,1"])
def test_parse_gpus_rejects(value: str) -> None:
    with pytest.raises(UsageError, match="--gpus"):
        parse_gpus(value)


@pytest.mark.parametrize("name", ["Kubetrain", "-a", "a_b", "a" * 51, "a/b"])
def test_bad_names(name: str) -> None:
    with pytest.raises(UsageError, match="--name"):
        check_name(name)


def test_good_name() -> None:
    assert check_name("dev-1.gpu") == "dev-1.gpu"
