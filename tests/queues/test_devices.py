"""Kueue's deviceClassMappings as kubetrain reads them from the manager's configuration (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from kubetrain.kube.errors import Forbidden
from kubetrain.queues import devices

CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
resources:
  deviceClassMappings:
  - name: example.com/gpu
    deviceClassNames: [gpu.example.com, gpu.nvidia.com]
  - name: example.com/tpu
    deviceClassNames: [tpu.example.com]
"""


class ConfigMaps:
    def __init__(self, data: dict[str, str] | None = None, error: Exception | None = None) -> None:
        self.data, self.error, self.paths = data, error, []

    def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        if self.error is not None:
            raise self.error
        return {"data": self.data}


def test_every_device_class_maps_to_its_logical_resource() -> None:
    rest = ConfigMaps({devices.CONFIG_KEY: CONFIG})
    assert devices.device_class_mappings(rest) == {  # type: ignore[arg-type]
        "gpu.example.com": "example.com/gpu", "gpu.nvidia.com": "example.com/gpu", "tpu.example.com": "example.com/tpu"}
    assert rest.paths == ["/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config"]


@pytest.mark.parametrize("rest", [ConfigMaps(error=Forbidden(403, "Forbidden", "configmaps is forbidden")),
                                  ConfigMaps({}), ConfigMaps({devices.CONFIG_KEY: "resources: [unclosed"})])
def test_an_unreadable_configuration_is_none(rest: ConfigMaps) -> None:
    assert devices.device_class_mappings(rest) is None  # type: ignore[arg-type]


def test_a_configuration_without_mappings_maps_nothing() -> None:
    assert devices.mappings_of({"kind": "Configuration"}) == {}
