"""The GPU-model vocabulary of each cloud profile's node label, for `placement.gpuType` and its did-you-mean.

Sources: GKE "About GPUs" (cloud.google.com/gke-accelerator values), EKS Auto Mode's
eks.amazonaws.com/instance-gpu-name and Karpenter's karpenter.k8s.aws/instance-gpu-name (lower-case model
names of the EC2 GPU instance families). `generic` (GPU Feature Discovery's nvidia.com/gpu.product) is free
form, so it is not checked. A model newer than this list can be selected with placement.nodeSelector.
"""

from __future__ import annotations

import difflib

_EC2 = ("a10g", "a100", "b200", "gb200", "h100", "h200", "k80", "l4", "l40s", "m60", "t4", "t4g", "v100",
        "rtx-pro-6000")
GPU_TYPES: dict[str, tuple[str, ...]] = {
    "gke": ("nvidia-tesla-t4", "nvidia-tesla-p4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-k80",
            "nvidia-l4", "nvidia-tesla-a100", "nvidia-a100-80gb", "nvidia-h100-80gb", "nvidia-h100-mega-80gb",
            "nvidia-h200-141gb", "nvidia-b200", "nvidia-gb200", "nvidia-rtx-pro-6000"),
    "eks": _EC2,
    "eks-karpenter": _EC2,
}
LABELS = {"gke": "cloud.google.com/gke-accelerator", "eks": "eks.amazonaws.com/instance-gpu-name",
          "eks-karpenter": "karpenter.k8s.aws/instance-gpu-name"}


def gpu_type_error(cloud: str, gpu_type: str) -> str | None:
    known = GPU_TYPES.get(cloud)
    if known is None or gpu_type in known:
        return None
    wanted = gpu_type.lower()
    # 'nvidia-h100' means 'nvidia-h100-80gb' rather than the edit-distance neighbour 'nvidia-b200'.
    close = [k for k in known if k.startswith(wanted)] or difflib.get_close_matches(wanted, known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
    return (f"{gpu_type!r} is not a {LABELS[cloud]} value of the {cloud} profile{hint} (for a model kubetrain "
            f"does not know yet, set placement.nodeSelector[\"{LABELS[cloud]}\"] instead)")
