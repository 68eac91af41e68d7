"""A pod's DNS settings (pkg/apis/core/validation/validation.go: validatePodDNSConfig; apimachinery
IsDNS1123SubdomainWithUnderscore)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from kubetrain.fieldpath import PathKey
from kubetrain.rules.findings import Finding
from kubetrain.rules.k8s import names
from kubetrain.rules.k8s.base import Findings, check, items, mapping, named
from kubetrain.rules.k8s.versions import Rules

MAX_NAMESERVERS = 3
MAX_SEARCHES = 32
MAX_SEARCH_CHARS = 2048
LABEL_WITH_UNDERSCORE = r"_?[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
SUBDOMAIN_WITH_UNDERSCORE = re.compile(rf"{LABEL_WITH_UNDERSCORE}(\.{LABEL_WITH_UNDERSCORE})*")
LEGACY_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")  # leading zeros: IsValidIPForLegacyField without strict IPs


def dns_config(spec: dict[str, Any], path: PathKey, rules: Rules) -> Findings:
    config, where = spec.get("dnsConfig"), (*path, "dnsConfig")
    servers = items(mapping(config).get("nameservers"))
    if spec.get("dnsPolicy") == "None":
        if config is None:
            yield Finding(where, "Required value: must provide `dnsConfig` when `dnsPolicy` is None")
            return
        if not servers:
            yield Finding((*where, "nameservers"),
                          "Required value: must provide at least one DNS nameserver when `dnsPolicy` is None")
            return
    if not isinstance(config, dict):
        return
    if len(servers) > MAX_NAMESERVERS:
        yield Finding((*where, "nameservers"), f"must not have more than {MAX_NAMESERVERS} nameservers")
    for index, server in enumerate(servers):
        yield from check((*where, "nameservers", index), ip_problem(server, rules))
    yield from _searches(items(config.get("searches")), (*where, "searches"), rules)
    for option, at in named(config.get("options"), (*where, "options")):
        if not option.get("name"):
            yield Finding(at, "Required value: must not be empty")


def _searches(searches: list[Any], path: PathKey, rules: Rules) -> Findings:
    if len(searches) > MAX_SEARCHES:
        yield Finding(path, f"must not have more than {MAX_SEARCHES} search paths")
    if len(" ".join(map(str, searches))) > MAX_SEARCH_CHARS:
        yield Finding(path, f"must not have more than {MAX_SEARCH_CHARS} characters (including spaces) in the "
                      "search list")
    for index, search in enumerate(searches):
        if not isinstance(search, str):
            continue
        if rules.relaxed_dns_search:  # RelaxedDNSSearchValidation: '.' alone, and '_' in labels
            if search != ".":
                yield from check((*path, index), _subdomain_with_underscore(search.removesuffix(".")))
        else:
            problem = names.dns1123_subdomain(search.removesuffix("."))
            yield from check((*path, index), f"{problem} ({rules.name}; '_' and '.' need 1.33)" if problem else None)


def _subdomain_with_underscore(value: str) -> str | None:
    if len(value) > names.DNS1123_SUBDOMAIN_MAX:
        return f"{value[:40]!r}...: must be no more than 253 characters"
    if not SUBDOMAIN_WITH_UNDERSCORE.fullmatch(value):
        return (f"{value!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character")
    return None


def ip_problem(value: Any, rules: Rules) -> str | None:
    """IsValidIPForLegacyField: ParseIPSloppy, and with StrictIPCIDRValidation (beta 1.36) no leading zeros
    and no IPv4-mapped IPv6 address."""
    invalid = f"{value!r}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
    if not isinstance(value, str) or "%" in value:
        return invalid
    if LEGACY_IPV4.fullmatch(value) and all(int(part) <= 255 for part in value.split(".")):
        if rules.strict_ips and any(len(part) > 1 and part.startswith("0") for part in value.split(".")):
            return f"{value!r}: must not have leading 0s ({rules.name}; allowed before 1.36)"
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return invalid
    if rules.strict_ips and isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return f"{value!r}: must not be an IPv4-mapped IPv6 address ({rules.name}; allowed before 1.36)"
    return None
