"""What a pod needs for GKE GPUDirect-TCPX (A3 High) and GPUDirect-TCPXO (A3 Mega). Pure functions.

From GKE's "Maximize GPU network bandwidth with GPUDirect and multi-networking" guide and the sample
workloads in GoogleCloudPlatform/container-engine-accelerators (gpudirect-tcpx/, gpudirect-tcpxo/):
- the pod joins the node's GPU NICs as eth1..ethN through `networking.gke.io/interfaces` (eth0 stays the
  pod network, `networking.gke.io/default-interface`);
- the receive-datapath-manager daemon (tcpx-daemon / tcpxo-daemon) runs in the same pod, because it must
  share the pod's network namespace when hostNetwork is false. It runs as a native sidecar (init container
  with restartPolicy Always, GKE >= 1.29) so it stops when the trainer exits and the Job can complete;
- the daemon sees the GPUs through GKE's NRI device injector (`devices.gke.io/container.<name>`) instead of
  a GPU request, and the host's /sys and /proc/sys at /hostsysfs and /hostprocsysfs;
- the NCCL plugin is not in the training image: GKE's nccl-tcpx(o)-installer DaemonSet puts it into the
  node's /home/kubernetes/bin/nvidia/lib64, which both containers mount at /usr/local/nvidia/lib64.
"""

from __future__ import annotations

import json
from typing import Any

from kubetrain.jobspec.network import Network

LIB_DIR = "/usr/local/nvidia/lib64"
HOST_LIB_DIR = "/home/kubernetes/bin/nvidia/lib64"
TCPX_SOCKET_DIR = "/run/tcpx"  # the daemon's unix socket, shared with NCCL through an emptyDir
APERTURE_DIR = "/dev/aperture_devices"  # TCPXO's LLCM devices

# NCCL settings GKE documents for each fabric (TCPXO: the image's nccl-env-profile.sh).
_CHUNKS = {"NCCL_DYNAMIC_CHUNK_SIZE": "524288", "NCCL_P2P_NET_CHUNKSIZE": "524288",
           "NCCL_P2P_PCI_CHUNKSIZE": "524288", "NCCL_P2P_NVL_CHUNKSIZE": "1048576"}
TCPX_ENV = {
    "NCCL_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_P2P_PXN_LEVEL": "0", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1,eth2,eth3,eth4",
    "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0", **_CHUNKS, "NCCL_BUFFSIZE": "4194304", "NCCL_NSOCKS_PERTHREAD": "4",
    "NCCL_SOCKET_NTHREADS": "1",
    # CPU cores next to each NIC's PCIe switch on a3-highgpu-8g.
    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "eth1:8-21,112-125;eth2:8-21,112-125;eth3:60-73,164-177;eth4:60-73,164-177",
    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "eth1:22-35,126-139;eth2:22-35,126-139;eth3:74-87,178-191;eth4:74-87,178-191",
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
    "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": TCPX_SOCKET_DIR, "LD_LIBRARY_PATH": LIB_DIR,
}
TCPXO_ENV = {
    "NCCL_FASTRAK_CTRL_DEV": "eth0", "NCCL_FASTRAK_IFNAME": ",".join(f"eth{i}" for i in range(1, 9)),
    "NCCL_SOCKET_IFNAME": "eth0", "NCCL_CROSS_NIC": "0", "NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": "Simple,LL128",
    "NCCL_MIN_NCHANNELS": "4", "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
    "NCCL_TUNER_CONFIG_PATH": f"{LIB_DIR}/a3plus_tuner_config.textproto",
    "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": f"{LIB_DIR}/a3plus_guest_config.textproto", **_CHUNKS,
    "NCCL_FASTRAK_NUM_FLOWS": "2", "NCCL_FASTRAK_USE_SNAP": "1", "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
    "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0", "NCCL_BUFFSIZE": "8388608", "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0", "NCCL_FASTRAK_USE_LLCM": "1", "NCCL_NVLS_ENABLE": "0",
    "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": APERTURE_DIR, "LD_LIBRARY_PATH": LIB_DIR,
}
_DAEMON_ARGS = {
    "gpudirect-tcpx": ["/tcpgpudmarxd/build/app/tcpgpudmarxd", "--gpu_nic_preset", "a3vm", "--gpu_shmem_type",
                       "fd", "--uds_path", TCPX_SOCKET_DIR, "--setup_param", "--verbose 128 2 0 "],
    # The image's entrypoint script is not always executable; GKE's samples chmod it first.
    "gpudirect-tcpxo": ["/bin/sh", "-c", "chmod 755 /fts/entrypoint_rxdm_container.sh && exec "
                        "/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics=8 --uid= --alsologtostderr"],
}


def daemon_name(network: Network) -> str:
    return "tcpx-daemon" if network.fabric == "gpudirect-tcpx" else "tcpxo-daemon"


def gpudirect_env(network: Network) -> dict[str, str]:
    return TCPX_ENV if network.fabric == "gpudirect-tcpx" else TCPXO_ENV


def gpudirect_annotations(network: Network, gpus: int) -> dict[str, str]:
    devices = [f"/dev/nvidia{i}" for i in range(gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    if network.fabric == "gpudirect-tcpxo":
        devices.append("/dev/dmabuf_import_helper")
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces += [{"interfaceName": f"eth{i}", "network": name} for i, name in enumerate(network.networks, 1)]
    return {
        f"devices.gke.io/container.{daemon_name(network)}": "".join(f"- path: {d}\n" for d in devices),
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces, separators=(",", ":")),
    }


def gpudirect_volumes(network: Network) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's extra volumes and the trainer container's mounts of them."""
    volumes: list[dict[str, Any]] = [
        {"name": "nvidia-libs", "hostPath": {"path": HOST_LIB_DIR}},
        {"name": "sys", "hostPath": {"path": "/sys"}},
        {"name": "proc-sys", "hostPath": {"path": "/proc/sys"}},
    ]
    mounts: list[dict[str, Any]] = [{"name": "nvidia-libs", "mountPath": LIB_DIR, "readOnly": True}]
    if network.fabric == "gpudirect-tcpx":
        volumes.append({"name": "tcpx-socket", "emptyDir": {}})
        mounts.append({"name": "tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
    else:
        volumes.append({"name": "aperture-devices", "hostPath": {"path": APERTURE_DIR}})
        mounts.append({"name": "aperture-devices", "mountPath": APERTURE_DIR})
    return volumes, mounts


def gpudirect_sidecar(network: Network) -> dict[str, Any]:
    mounts: list[dict[str, Any]] = [{"name": "nvidia-libs", "mountPath": LIB_DIR, "readOnly": True},
                                    {"name": "sys", "mountPath": "/hostsysfs"},
                                    {"name": "proc-sys", "mountPath": "/hostprocsysfs"}]
    if network.fabric == "gpudirect-tcpx":
        mounts.append({"name": "tcpx-socket", "mountPath": TCPX_SOCKET_DIR})
    caps = ["NET_ADMIN"] if network.fabric == "gpudirect-tcpx" else ["NET_ADMIN", "NET_BIND_SERVICE"]
    return {
        "name": daemon_name(network),
        "image": network.daemonImage,
        "restartPolicy": "Always",  # a native sidecar: Kubernetes stops it once the trainer exits
        "command": _DAEMON_ARGS[network.fabric][:1],
        "args": _DAEMON_ARGS[network.fabric][1:],
        "env": [{"name": "LD_LIBRARY_PATH", "value": LIB_DIR}],
        "securityContext": {"capabilities": {"add": caps}},
        "volumeMounts": mounts,
    }

