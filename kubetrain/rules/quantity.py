"""Kubernetes resource quantities ("500m", "32Gi", "1e3"): validation and conversion."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# The same grammar as the apiserver's resource.Quantity (and the CRDs' int-or-string pattern).
QUANTITY_RE = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
            "P": Decimal(10**15), "E": Decimal(10**18)}
_SPLIT = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def is_quantity(text: str) -> bool:
    return bool(QUANTITY_RE.fullmatch(text))


def parse_quantity(text: str | int | float) -> Decimal:
    """The quantity's value in base units (bytes for memory, cores for cpu); ValueError for anything that is
    not one (a boolean, a NaN or infinite number, a mapping read from YAML)."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    if isinstance(text, int | float):
        value = Decimal(str(text))
        if not value.is_finite():
            raise ValueError(f"not a Kubernetes quantity: {text!r}")
        return value
    match = _SPLIT.match(text.strip())
    if not match or not is_quantity(text.strip()):
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the regex already vetted it
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from exc
    try:
        return value * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    except ArithmeticError as exc:  # an exponent past Decimal's range, e.g. 1e999999Ei
        raise ValueError(f"not a Kubernetes quantity: {text!r} (out of range)") from exc


def format_bytes(value: Decimal | int) -> str:
    """Bytes as the largest exact binary unit, so rendering stays deterministic and readable."""
    amount = int(value)
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)
