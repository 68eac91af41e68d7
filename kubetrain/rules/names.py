"""Kubernetes naming rules (RFC 1123 / RFC 1035 labels, label keys and values, env var names)."""

from __future__ import annotations

import re

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# The distribution/reference grammar (what the kubelet parses; an invalid one is InvalidImageName).
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF = re.compile(
    rf"^(?:{_DOMAIN}(?::[0-9]+)?/)?{_PATH}(?:/{_PATH})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$")
MODULE_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


def dns_label_error(value: str, *, rfc1035: bool = False) -> str | None:
    pattern = DNS1035_LABEL if rfc1035 else DNS1123_LABEL
    if len(value) > 63:
        return f"must be at most 63 characters (has {len(value)})"
    if not pattern.fullmatch(value):
        start = "start with a lower-case letter" if rfc1035 else "start with a lower-case letter or digit"
        return f"{value!r} must consist of lower-case letters, digits and '-', {start} and end with one"
    return None


def subdomain_error(value: str) -> str | None:
    if len(value) > 253:
        return f"must be at most 253 characters (has {len(value)})"
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        return f"{value!r} must be a lower-case RFC 1123 subdomain (letters, digits, '-' and '.')"
    return None


def qualified_name_error(key: str) -> str | None:
    """Label and annotation keys: an optional DNS-subdomain prefix, '/', and a name of <= 63 chars."""
    prefix, _, name = key.rpartition("/")
    if prefix and subdomain_error(prefix):
        return f"key {key!r}: prefix must be a DNS subdomain"
    if not name or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        return (f"key {key!r} must be an optional DNS prefix and '/' then a name of at most 63 alphanumerics, "
                "'-', '_' or '.'")
    return None


def label_value_error(value: str) -> str | None:
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        return (f"label value {value!r} must be at most 63 alphanumerics, '-', '_' or '.', beginning and "
                "ending with an alphanumeric")
    return None


def image_error(value: str) -> str | None:
    if len(value) > 4096 or not IMAGE_REF.fullmatch(value):
        return (f"{value[:80]!r} is not an image reference like registry.example.com/team/image:tag "
                "(the kubelet would fail with InvalidImageName)")
    return None

# Set by the operators per pod (torchrun reads PET_* as its flags): a spec or manifest must not set them.
TORCHRUN_RESERVED_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                         "PET_MASTER_PORT")
