"""apimachinery's name and value checks (k8s.io/apimachinery/pkg/util/validation/validation.go), each
returning the problem or None. The regular expressions are upstream's."""

from __future__ import annotations

import re
from functools import lru_cache

from kubetrain.rules import names

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
PORT_NAME = re.compile(r"^[-a-z0-9]+$")
HAS_LETTER = re.compile(r"[a-z]")
RELAXED_ENV_NAME = re.compile(r"^[\x20-\x3c\x3e-\x7e]+$")  # printable ASCII but '='
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
CACHE = 4096  # the same names recur in every job of a large run
INT32_MAX = 2**31 - 1


@lru_cache(CACHE)
def dns1123_label(value: str) -> str | None:
    """IsDNS1123Label."""
    return names.dns_label_error(value)


@lru_cache(CACHE)
def dns1035_label(value: str) -> str | None:
    """IsDNS1035Label."""
    return names.dns_label_error(value, rfc1035=True)


@lru_cache(CACHE)
def dns1123_subdomain(value: str) -> str | None:
    """IsDNS1123Subdomain."""
    return names.subdomain_error(value)


@lru_cache(CACHE)
def qualified_name(value: str) -> str | None:
    """IsQualifiedName (label keys, annotation keys, toleration and node-selector keys)."""
    return names.qualified_name_error(value)


@lru_cache(CACHE)
def label_value(value: str) -> str | None:
    """IsValidLabelValue."""
    return names.label_value_error(value)


@lru_cache(CACHE)
def env_var_name(value: str) -> str | None:
    """IsRelaxedEnvVarName (RelaxedEnvironmentVariableValidation, GA in 1.34): printable ASCII but '='."""
    if not value:
        return "required value"
    if not RELAXED_ENV_NAME.fullmatch(value):
        return (f"{value!r}: a valid environment variable name must consist only of printable ASCII characters "
                "other than '='")
    return None


@lru_cache(CACHE)
def strict_env_var_name(value: str) -> str | None:
    """IsEnvVarName (before RelaxedEnvironmentVariableValidation): letters, digits, '_', '-', '.', no leading
    digit, and not '.', '..' or '..'-prefixed (hasChDirPrefix)."""
    if not ENV_NAME.fullmatch(value):
        return (f"{value!r}: a valid environment variable name must consist of alphabetic characters, digits, "
                "'_', '-', or '.', and must not start with a digit")
    if value.startswith(".."):
        return f"{value!r}: must not start with '..'"
    if value == ".":
        return f"{value!r}: must not be '.'"
    return None


@lru_cache(CACHE)
def configmap_key(value: str) -> str | None:
    """IsConfigMapKey (ConfigMap and Secret keys, keyRef keys)."""
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"key {value[:40]!r}...: must be no more than 253 characters"
    if not CONFIGMAP_KEY.fullmatch(value):
        return f"key {value!r}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
    if value in (".", "..") or value.startswith(".."):
        return f"key {value!r}: must not be '.' or '..' nor start with '..'"
    return None


@lru_cache(CACHE)
def port_name(value: str) -> str | None:
    """IsValidPortName (IANA_SVC_NAME)."""
    if len(value) > 15:
        return f"port name {value!r} must be no more than 15 characters"
    if not PORT_NAME.fullmatch(value) or value.startswith("-") or value.endswith("-") or "--" in value:
        return (f"port name {value!r} must contain only lower-case alphanumerics and '-', not at either end or "
                "twice in a row")
    if not HAS_LETTER.search(value):
        return f"port name {value!r} must contain at least one letter"
    return None


def port_number(value: object, *, allow_zero: bool = False) -> str | None:
    """IsValidPortNum (1-65535), or IsInRange(0, 65535) for a hostPort or nodePort."""
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 65535:
        return f"{value!r}: must be between {low} and 65535, inclusive"
    return None


def port_number_or_name(value: object) -> str | None:
    """validatePortNumOrName: an int-or-string port (probes, targetPort)."""
    if isinstance(value, str):
        return port_name(value)
    return port_number(value)


def int32(value: object) -> str | None:
    """A Go int32 field: larger numbers fail JSON decoding on the API server."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**31) <= value <= INT32_MAX:
        return f"{value} does not fit in a 32-bit integer (-2147483648 to 2147483647)"
    return None
