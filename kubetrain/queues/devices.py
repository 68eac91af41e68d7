"""Which Kueue quota a job's DRA devices count against.

Kueue (>= 0.14, feature KueueDRAIntegration, on by default since 0.18) counts the devices a pod's
ResourceClaimTemplates request only through its configuration's `resources.deviceClassMappings`: each entry
names a logical resource (what ClusterQueues give `nominalQuota` for) and the DeviceClasses counted as it. A
workload claiming a DeviceClass no entry maps is never admitted ("DeviceClass ... is not mapped in DRA
configuration"). The configuration is the manager's file, which Kueue's manifests ship as ConfigMap
kueue-system/kueue-manager-config (key controller_manager_config.yaml); it is read there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from kubetrain.kube.errors import Forbidden, NotFound

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

CONFIG_NAMESPACE, CONFIG_MAP, CONFIG_KEY = "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"
WHERE = f"ConfigMap {CONFIG_NAMESPACE}/{CONFIG_MAP}"


def device_class_mappings(rest: Rest) -> dict[str, str] | None:
    """DeviceClass -> the logical resource Kueue counts it as; None when Kueue's configuration cannot be read
    (no such ConfigMap, not allowed to read it, or not YAML)."""
    try:
        configmap = rest.get(f"/api/v1/namespaces/{CONFIG_NAMESPACE}/configmaps/{CONFIG_MAP}")
    except (Forbidden, NotFound):
        return None
    try:
        config = yaml.safe_load(str((configmap.get("data") or {}).get(CONFIG_KEY) or ""))
    except yaml.YAMLError:
        return None
    return mappings_of(config) if isinstance(config, dict) else None


def mappings_of(config: dict[str, Any]) -> dict[str, str]:
    """The DeviceClass -> resource pairs of a Kueue Configuration (v1beta1 and v1beta2 spell them alike)."""
    out: dict[str, str] = {}
    for mapping in (config.get("resources") or {}).get("deviceClassMappings") or []:
        for device_class in mapping.get("deviceClassNames") or []:
            out[str(device_class)] = str(mapping.get("name"))
    return out
