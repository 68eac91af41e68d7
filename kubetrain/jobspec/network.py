"""The inter-node GPU fabric of multi-node jobs (EFA on AWS, InfiniBand/RoCE elsewhere).

What each fabric needs in the pod, from the providers' documentation:
- AWS EFA (EKS "Elastic Fabric Adapter" guide; aws-ofi-nccl): the EFA device plugin's extended resource
  `vpc.amazonaws.com/efa` (p5.48xlarge has 32 interfaces, p4d 4), the IPC_LOCK capability (libfabric pins
  memory), and FI_PROVIDER=efa plus FI_EFA_USE_DEVICE_RDMA=1 for GPUDirect RDMA.
- InfiniBand / RoCE (NVIDIA Network Operator, k8s-rdma-shared-dev-plugin): an RDMA extended resource whose
  name the cluster's device plugin chooses (`rdma/ib` in the shared-device plugin's examples; set
  `resource`), IPC_LOCK, and NCCL_IB_DISABLE=0.
- GKE GPUDirect-TCPX (A3 High) / TCPXO (A3 Mega) ("Maximize GPU network bandwidth with GPUDirect and
  multi-networking"): no extended resource, but the pod joins 4 (TCPX) or 8 (TCPXO) GKE Networks through
  the `networking.gke.io/interfaces` annotation and runs the receive-datapath-manager daemon as a sidecar.
  The Network names and the daemon image are cluster-specific, so they are spec fields; the pod settings
  live in kubetrain/render/gpudirect.py.
"""


from typing import Annotated, Literal

from pydantic import Field, model_validator

from kubetrain.jobspec.sections import Section

FABRICS: dict[str, tuple[str, dict[str, str]]] = {
    "efa": ("vpc.amazonaws.com/efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}),
    "infiniband": ("rdma/ib", {"NCCL_IB_DISABLE": "0"}),
}
# The pod volumes kubetrain/render/gpudirect.py adds; a user volume must not take these names.
GPUDIRECT_VOLUMES = frozenset({"nvidia-libs", "sys", "proc-sys", "tcpx-socket", "aperture-devices"})
GPUDIRECT_NICS = {"gpudirect-tcpx": 4, "gpudirect-tcpxo": 8}  # GPU NICs per A3 High / A3 Mega node


class Network(Section):
    """The inter-node fabric for NCCL: its devices, the IPC_LOCK capability, and NCCL/libfabric settings."""

    fabric: Literal["efa", "infiniband", "gpudirect-tcpx", "gpudirect-tcpxo"]
    """efa (AWS Elastic Fabric Adapter), infiniband (InfiniBand or RoCE through an RDMA device plugin),
    gpudirect-tcpx (GKE A3 High) or gpudirect-tcpxo (GKE A3 Mega)."""
    devices: Annotated[int, Field(ge=1, le=64)] = 1
    """Fabric devices per pod, e.g. 32 for EFA on p5.48xlarge, 4 on p4d.24xlarge."""
    resource: Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$")] | None = None
    """The device plugin's extended resource; default vpc.amazonaws.com/efa (efa) or rdma/ib (infiniband)."""
    networks: list[Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]] = Field(default_factory=list)
    """gpudirect only: the GKE Network objects of the GPU NICs eth1.. in order, 4 for tcpx, 8 for tcpxo."""
    daemonImage: Annotated[str, Field(min_length=1)] | None = None
    """gpudirect only: the receive-datapath-manager image with its tag, matching the NCCL plugin the
    cluster's nccl-tcpx(o)-installer put on the node, e.g.
    us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.17."""

    @model_validator(mode="after")
    def _fabric_fields(self) -> "Network":
        nics = GPUDIRECT_NICS.get(self.fabric)
        if nics is None:
            if self.networks or self.daemonImage:
                raise ValueError(f"networks and daemonImage are only for gpudirect fabrics, not {self.fabric}")
            return self
        missing = [name for name in ("daemonImage",) if getattr(self, name) is None]
        if len(self.networks) != nics:
            missing.append(f"networks (exactly {nics} GKE Network names, got {len(self.networks)})")
        if missing:
            raise ValueError(f"fabric {self.fabric} needs " + " and ".join(missing))
        if self.resource:
            raise ValueError(f"fabric {self.fabric} uses no device-plugin resource; remove resource")
        return self

    @property
    def gpudirect(self) -> bool:
        return self.fabric in GPUDIRECT_NICS

    @property
    def resource_name(self) -> str | None:
        return None if self.gpudirect else self.resource or FABRICS[self.fabric][0]
