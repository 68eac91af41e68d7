"""GKE GPUDirect-TCPX / TCPXO: the cluster-specific fields are required, the pod gets what GKE documents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.errors import SpecError
from kubetrain.jobspec.network import GPUDIRECT_VOLUMES
from kubetrain.render.gpudirect import gpudirect_volumes
from kubetrain.render.yamlout import dump_yaml
from tests.render.test_rules import env, job, pod, pytorchjob

TCPX = {"fabric": "gpudirect-tcpx", "networks": ["vpc1", "vpc2", "vpc3", "vpc4"],
        "daemonImage": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.9"}
TCPXO = {"fabric": "gpudirect-tcpxo", "networks": [f"gpu-nic{i}" for i in range(8)],
         "daemonImage": "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.17"}
A3 = {"nodes": 2, "gpusPerNode": 8, "placement": {"cloud": "gke"}}


def test_tcpx_pod_joins_the_gpu_networks_and_runs_the_daemon_as_a_native_sidecar() -> None:
    obj = pytorchjob(network=TCPX, **A3)
    annotations = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    interfaces = json.loads(annotations["networking.gke.io/interfaces"])
    assert [(i["interfaceName"], i["network"]) for i in interfaces] == [
        ("eth0", "default"), ("eth1", "vpc1"), ("eth2", "vpc2"), ("eth3", "vpc3"), ("eth4", "vpc4")]
    assert annotations["networking.gke.io/default-interface"] == "eth0"
    assert "- path: /dev/nvidia7\n" in annotations["devices.gke.io/container.tcpx-daemon"]
    sidecar: dict[str, Any] = pod(obj)["initContainers"][0]
    assert (sidecar["name"], sidecar["restartPolicy"]) == ("tcpx-daemon", "Always")
    assert sidecar["image"] == TCPX["daemonImage"]
    assert env(obj)["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    # The daemon's unix socket directory is shared by the sidecar and NCCL in the trainer.
    trainer_mounts = {m["name"]: m["mountPath"] for m in pod(obj)["containers"][0]["volumeMounts"]}
    sidecar_mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    socket_dir = env(obj)["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"]
    assert trainer_mounts["tcpx-socket"] == sidecar_mounts["tcpx-socket"] == socket_dir
    assert not any("IPC_LOCK" in str(c.get("securityContext")) for c in pod(obj)["containers"])
    assert "vpc.amazonaws.com/efa" not in dump_yaml([obj]) and "rdma/" not in dump_yaml([obj])


def test_tcpxo_uses_eight_nics_fastrak_and_the_aperture_devices() -> None:
    obj = pytorchjob(network=TCPXO, **A3)
    meta = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"]
    assert len(json.loads(meta["networking.gke.io/interfaces"])) == 9
    assert "/dev/dmabuf_import_helper" in meta["devices.gke.io/container.tcpxo-daemon"]
    assert env(obj)["NCCL_FASTRAK_IFNAME"] == "eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8"
    assert pod(obj)["initContainers"][0]["name"] == "tcpxo-daemon"
    assert {"name": "aperture-devices", "hostPath": {"path": "/dev/aperture_devices"}} in pod(obj)["volumes"]


@pytest.mark.parametrize(("network", "spec", "message"), [
    ({"fabric": "gpudirect-tcpx"}, A3, r"fabric gpudirect-tcpx needs daemonImage and networks \(exactly 4"),
    ({**TCPXO, "networks": ["vpc1"]}, A3, r"needs networks \(exactly 8 GKE Network names, got 1\)"),
    ({**TCPX, "resource": "rdma/ib"}, A3, r"uses no device-plugin resource"),
    ({"fabric": "efa", "networks": ["vpc1"]}, A3, r"only for gpudirect fabrics, not efa"),
    ({**TCPX, "networks": ["VPC_1", "b", "c", "d"]}, A3, r"spec.network.networks.0"),
    (TCPX, {**A3, "gpusPerNode": 4}, r"spec.gpusPerNode: fabric gpudirect-tcpx runs on 8-GPU A3 nodes"),
    (TCPX, {**A3, "placement": {"cloud": "eks"}}, r"spec.placement.cloud: fabric gpudirect-tcpx is GKE-only"),
    (TCPX, {**A3, "volumes": [{"name": "sys", "claim": "c", "mountPath": "/s"}]}, r"spec.volumes\[0\].name"),
])
def test_missing_or_inconsistent_gpudirect_fields_are_load_errors(
        network: dict[str, Any], spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        job(network=network, **spec)


def test_trainjob_target_refuses_gpudirect_with_one_line(tmp_path: Any) -> None:
    path = tmp_path / "kubetrain.yaml"
    path.write_text(json.dumps({"apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingJob",
                                "metadata": {"name": "j"}, "spec": {"image": "r/i:1", "command": ["python", "t.py"],
                                                                   "target": "trainjob", "network": TCPX, **A3}}))
    result = CliRunner().invoke(cli, ["render", "-f", str(path)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "spec.network.fabric: not supported with target trainjob" in result.output


def test_every_gpudirect_volume_name_is_reserved() -> None:
    for network in (TCPX, TCPXO):
        volumes, _ = gpudirect_volumes(job(network=network, **A3).spec.network)  # type: ignore[arg-type]
        assert {v["name"] for v in volumes} <= GPUDIRECT_VOLUMES
