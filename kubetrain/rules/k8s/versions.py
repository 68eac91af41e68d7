"""The pod rules that differ between the Kubernetes minor versions kubetrain supports.

Each flag is what the API server of that minor version does on a create with its default feature gates
(k8s.io/kubernetes pkg/features/kube_features.go, the gate's first default-on version; pkg/api/pod/util.go
GetValidationOptionsFromPodSpecAndMeta and dropDisabledPodFields; checked against the v1.31.0, v1.34.0,
v1.36.3 and v1.37.2 sources). Rules whose gate is off in every supported version (Lt/Gt tolerations, stop signals) and
fields an older server drops without a word (pod-level resources, hostnameOverride) do not change a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kubetrain.errors import SchemaError

OLDEST = 31
NEWEST = 37
SUITE = 37  # the suite's kube-apiserver (tests/testenv/versions.env): the default, and what render refuses by
DEFAULT = f"1.{SUITE}"


@dataclass(frozen=True)
class Rules:
    minor: int

    @property
    def name(self) -> str:
        return f"Kubernetes 1.{self.minor}"

    @property
    def dra(self) -> bool:
        """DynamicResourceAllocation (GA 1.34): resource.k8s.io/v1 is served, and pod resourceClaims and
        container claims are kept; before, the gate is off by default and the server drops them."""
        return self.minor >= 34

    @property
    def relaxed_env_names(self) -> bool:
        """RelaxedEnvironmentVariableValidation (beta 1.32): env names and envFrom prefixes of any printable
        ASCII but '='; before, IsEnvVarName."""
        return self.minor >= 32

    @property
    def sleep_zero(self) -> bool:
        """PodLifecycleSleepActionAllowZero (beta 1.33): `sleep.seconds: 0`."""
        return self.minor >= 33

    @property
    def relaxed_dns_search(self) -> bool:
        """RelaxedDNSSearchValidation (beta 1.33): `dnsConfig.searches` may be '.' and hold '_'."""
        return self.minor >= 33

    @property
    def strict_ips(self) -> bool:
        """StrictIPCIDRValidation (beta 1.36): legacy IP fields refuse leading zeros and IPv4-mapped IPv6."""
        return self.minor >= 36

    @property
    def container_restart_rules(self) -> bool:
        """ContainerRestartRules (beta 1.35): restartPolicy (and restartPolicyRules) on any container. 1.34
        drops both (alpha, off) and keeps only an init container's `Always`; older servers refuse them."""
        return self.minor >= 35

    @property
    def drops_container_restart_rules(self) -> bool:
        return self.minor == 34

    @property
    def restart_all_containers(self) -> bool:
        """RestartAllContainersOnContainerExits (beta 1.36): the RestartAllContainers action."""
        return self.minor >= 36

    @property
    def env_files(self) -> bool:
        """EnvFiles (beta 1.35): `valueFrom.fileKeyRef`. Older servers drop it (1.34) or do not know it, and
        the env var is left with no source."""
        return self.minor >= 35

    @property
    def image_volumes(self) -> bool:
        """ImageVolume (on by default in 1.35): an `image` volume. Older servers drop the source, and the
        volume is left with none."""
        return self.minor >= 35


@lru_cache(16)
def rules_for(version: str) -> Rules:
    """'1.34', 'v1.34' or '1.34.2': the rules of that minor version; others are a one-line SchemaError."""
    parts = version.strip().lstrip("v").split(".")
    if len(parts) < 2 or parts[0] != "1" or not all(p.isdigit() for p in parts[:3]):
        raise SchemaError(f"--kubernetes-version {version!r}: expected a version like {DEFAULT}")
    minor = int(parts[1])
    if not OLDEST <= minor <= NEWEST:
        raise SchemaError(f"--kubernetes-version {version}: kubetrain's rules cover Kubernetes 1.{OLDEST} to "
                          f"1.{NEWEST}")
    return Rules(minor)


LATEST = Rules(SUITE)
