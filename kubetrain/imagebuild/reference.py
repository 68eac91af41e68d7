"""Image references (the grammar of distribution/reference): split, validate, and tag by content hash."""

from __future__ import annotations

import re

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
MAX_NAME = 255
TAG_PREFIX = "kt-"
HASH_CHARS = 16


def split_reference(ref: str) -> tuple[str, str | None, str | None]:
    """'host:5000/a/b:tag@sha256:...' → ('host:5000/a/b', 'tag', 'sha256:...'). No validation."""
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
        return name, tag, digest or None
    return name, None, digest or None


def repository_error(repository: str) -> str | None:
    """Why `repository` is not a valid image repository, or None."""
    if not repository:
        return "is empty"
    if len(repository) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if not REPOSITORY.match(repository):
        return (f"{repository!r} is not a valid image repository (lower-case path components separated "
                "by '/', optionally after a registry host[:port], e.g. ghcr.io/acme/digits)")
    return None


def hash_tag(content_hash: str) -> str:
    """The tag for a content hash: short, recognisable, and valid in every registry."""
    return TAG_PREFIX + content_hash[:HASH_CHARS]
