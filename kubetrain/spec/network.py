"""The inter-node GPU fabric of multi-node jobs (EFA on AWS, InfiniBand/RoCE elsewhere).

What each fabric needs in the pod, from the providers' documentation:
- AWS EFA (EKS "Elastic Fabric Adapter" guide; aws-ofi-nccl): the EFA device plugin's extended resource
  `vpc.amazonaws.com/efa` (p5.48xlarge has 32 interfaces, p4d 4), the IPC_LOCK capability (libfabric pins
  memory), and FI_PROVIDER=efa plus FI_EFA_USE_DEVICE_RDMA=1 for GPUDirect RDMA.
- InfiniBand / RoCE (NVIDIA Network Operator, k8s-rdma-shared-dev-plugin): an RDMA extended resource whose
  name the cluster's device plugin chooses (`rdma/ib` in the shared-device plugin's examples; set
  `resource`), IPC_LOCK, and NCCL_IB_DISABLE=0.
GKE's GPUDirect-TCPX/TCPXO additionally need a per-node daemon sidecar, NRI device annotations and
cluster-specific multi-network annotations, which kubetrain does not generate yet.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kubetrain.spec.sections import Section

FABRICS: dict[str, tuple[str, dict[str, str]]] = {
    "efa": ("vpc.amazonaws.com/efa", {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}),
    "infiniband": ("rdma/ib", {"NCCL_IB_DISABLE": "0"}),
}


class Network(Section):
    """The inter-node fabric for NCCL: its devices, the IPC_LOCK capability, and NCCL/libfabric settings."""

    fabric: Literal["efa", "infiniband"]
    """efa (AWS Elastic Fabric Adapter) or infiniband (InfiniBand or RoCE through an RDMA device plugin)."""
    devices: Annotated[int, Field(ge=1, le=64)] = 1
    """Fabric devices per pod, e.g. 32 for EFA on p5.48xlarge, 4 on p4d.24xlarge."""
    resource: Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$")] | None = None
    """The device plugin's extended resource; default vpc.amazonaws.com/efa (efa) or rdma/ib (infiniband)."""

    @property
    def resource_name(self) -> str:
        return self.resource or FABRICS[self.fabric][0]

    @property
    def env(self) -> dict[str, str]:
        return FABRICS[self.fabric][1]
