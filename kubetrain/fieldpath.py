"""A field's place in a document, as a key path and as the text that messages name it by."""

from __future__ import annotations

import re

PathKey = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def join_path(loc: PathKey) -> str:
    """("spec", "volumes", 0, "name") -> "spec.volumes[0].name"."""
    text = ""
    for part in loc:
        if part == "[key]":  # pydantic's marker for an error in a mapping's key
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _PLAIN_KEY.match(str(part)):
            text += f'["{part}"]'  # label-style keys such as nvidia.com/gpu
        else:
            text += f".{part}" if text else str(part)
    return text
