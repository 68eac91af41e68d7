"""Configuration files of the real node's components (see node.py); pure functions, no I/O."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import binaries

if TYPE_CHECKING:
    from .node import RealNode

CLUSTER_DOMAIN = "cluster.local"
TAINT = "kubetrain.test/real-node"  # NoSchedule: other tests' pods stay on kwok's nodes


def cni_conflist(bridge: str, subnet: ipaddress.IPv4Network, workdir: Path) -> str:
    """bridge + host-local + loopback. No ipMasq and no portmap: pods talk only to each other and to
    the gateway (CoreDNS), so the host's iptables stay untouched."""
    return json.dumps({
        "cniVersion": "1.0.0",
        "name": "kubetrain",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(workdir / "cni" / "ipam"),
                    "ranges": [[{"subnet": str(subnet), "gateway": str(next(subnet.hosts()))}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "loopback"},
        ],
    }, indent=2)


def containerd_toml(workdir: Path, root: Path, socket: Path, cni_bin: Path, cdi_dir: Path) -> str:
    """containerd 1.7 (config version 2): state, socket and CNI config under `workdir`, images under `root`,
    CDI specs read from `cdi_dir` only (the devices a DRA driver prepares; off by default in 1.7).

    The default OCI spec keeps RLIMIT_NOFILE at 1024:1024, below this VM's hard limit; runc with the
    cgroupfs driver, as the kubelet is configured (cgroup v1 host, no systemd)."""
    pause = binaries.versions()["PAUSE_IMAGE"]
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{workdir / 'containerd' / 'state'}"
oom_score = 0

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{workdir / 'containerd' / 'opt'}"

[{cri}]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  # Pod network namespaces under the state dir (not /var/run/netns): nothing global to clean up.
  netns_mounts_under_state_dir = true
  enable_cdi = true
  cdi_spec_dirs = ["{cdi_dir}"]

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{cni_bin}"
  conf_dir = "{workdir / 'cni' / 'net.d'}"
  max_conf_num = 1
"""


def corefile(gateway: str, kubeconfig: Path, ports: dict[str, int]) -> str:
    """CoreDNS on the pod network's gateway: cluster.local from the apiserver, the rest forwarded."""
    return f""".:53 {{
    bind {gateway}
    errors
    health 127.0.0.1:{ports['dns_health']}
    ready 127.0.0.1:{ports['dns_ready']}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} kubetrain-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    forward . /etc/resolv.conf
}}
"""


def kubelet_config(node: RealNode, pki_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # kubelet >= 1.35 refuses cgroup v1 unless told; this host is cgroup v1 (hybrid).
        "failCgroupV1": False,
        # containerd 1.x lacks the RuntimeConfig CRI call, so 1.36 falls back to this (with a warning).
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,  # a per-session cgroup tree, so sessions cannot clash
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "address": node.gateway,
        "registerWithTaints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}],
        "port": node.ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.ports["kubelet_health"],
        "tlsCertFile": str(pki_dir / "kubelet.crt"),
        "tlsPrivateKeyFile": str(pki_dir / "kubelet.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki_dir / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [node.gateway],
        "podLogsDir": str(node.dir / "pod-logs"),
        "failSwapOn": False,
        "serializeImagePulls": False,
        # The test disk is shared with builds: never evict pods or garbage-collect images for disk pressure.
        # As kind does: 0% turns a disk signal off; all four are named so that none falls back to a default
        # (nodefs.inodesFree 5%, ...). At 1% a build filling the shared disk set DiskPressure: running e2e
        # pods were evicted (exit 137) and their replacements stayed Pending on the node's taint.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "0%", "nodefs.inodesFree": "0%",
                         "imagefs.available": "0%", "imagefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "maxPods": 20,
        "resolvConf": "/etc/resolv.conf",
        "protectKernelDefaults": False,
        "enableControllerAttachDetach": True,
        "localStorageCapacityIsolation": True,
    }
