"""The build context: which files the builder gets, a staging copy of them, and their content hash.

kubetrain stages the context itself (hard links where possible, else copies) instead of handing the
builder the user's directory, so that (a) the same bytes are hashed and built, (b) its own Dockerfile can
add the kubetrain runtime beside the user's code, and (c) every builder sees the same files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import BuildError
from kubetrain.imagebuild.dockerignore import PatternMatcher

STATE_DIR = ".kubetrain"  # kubetrain's local state (volumes, staging, scratch) never leaves the machine
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Entry:
    """A context entry: a regular file (executable or not), a symlink (its target), or an empty directory."""

    path: str  # '/'-separated, relative to the context root
    kind: str  # "file" | "exec" | "link" | "dir"
    source: Path  # where it lives on disk
    size: int = 0  # of a file, from stat, when the walk knew it

    def fingerprint(self) -> bytes:
        if self.kind == "link":
            return os.readlink(self.source).encode()
        if self.kind == "dir":
            return b""
        return file_digest(self.source)


def file_digest(path: Path) -> bytes:
    sha = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                sha.update(chunk)
    except OSError as exc:
        raise BuildError(f"{path}: cannot read: {exc.strerror}") from None
    return sha.digest()


def collect(root: Path, matcher: PatternMatcher, prefix: str = "") -> list[Entry]:
    """Every entry under `root` that Docker's ignore rules `matcher` keep, sorted by path, each path prefixed
    by `prefix` (kubetrain's own runtime files; a user's files go through kubetrain.imagebuild.selection)."""
    if not root.is_dir():
        raise BuildError(f"spec.build.context: {root} is not a directory")
    entries = [Entry(prefix + rel, kind, path) for rel, kind, path in _walk(root, "", matcher)]
    return sorted(entries, key=lambda e: e.path)


def _walk(root: Path, rel_dir: str, matcher: PatternMatcher) -> Iterator[tuple[str, str, Path]]:
    try:
        items = sorted(os.scandir(root / rel_dir if rel_dir else root), key=lambda d: d.name)
    except OSError as exc:
        raise BuildError(f"{root / rel_dir}: cannot list: {exc.strerror}") from None
    for item in items:
        rel = f"{rel_dir}/{item.name}" if rel_dir else item.name
        if rel == STATE_DIR:
            continue
        excluded = matcher.excluded(rel)
        if item.is_dir(follow_symlinks=False):
            if excluded and not matcher.must_walk(rel):
                continue
            children = list(_walk(root, rel, matcher))
            if not children and not excluded:
                yield rel, "dir", Path(item.path)
            yield from children
        elif not excluded:
            kind = _file_kind(item)
            if kind:
                yield rel, kind, Path(item.path)


def _file_kind(item: os.DirEntry[str]) -> str | None:
    if item.is_symlink():
        return "link"
    mode = item.stat(follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode):
        return None  # sockets, fifos, devices: Docker skips them too
    return "exec" if mode & 0o111 else "file"


def content_hash(entries: list[Entry], extra: list[tuple[str, bytes]]) -> str:
    """sha256 over every entry's path, kind and content digest, then the `extra` named inputs (Dockerfile,
    build args, base image...). Independent of mtimes, owners, walk order and the machine."""
    sha = hashlib.sha256(b"kubetrain-build-context/v1\0")
    for entry in entries:
        sha.update(f"{entry.kind}\0{entry.path}\0".encode())
        sha.update(entry.fingerprint())
        sha.update(b"\0")
    for name, value in extra:
        sha.update(f"{name}\0{len(value)}\0".encode())
        sha.update(value)
    return sha.hexdigest()


def stage(entries: list[Entry], dest: Path) -> None:
    """Materialise entries under `dest`: hard links when on the same filesystem, copies otherwise."""
    can_link = True
    for entry in entries:
        target = dest / entry.path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            if entry.kind == "dir":
                target.mkdir(exist_ok=True)
            elif entry.kind == "link":
                os.symlink(os.readlink(entry.source), target)
            else:
                can_link = _link_or_copy(entry.source, target, can_link)
        except OSError as exc:
            raise BuildError(f"staging {entry.path}: {exc.strerror or exc}") from None


def _link_or_copy(source: Path, target: Path, can_link: bool) -> bool:
    if can_link:
        try:
            os.link(source, target)
            return True
        except OSError:
            pass  # another filesystem, or links not allowed: copy from now on
    shutil.copy2(source, target)
    return False


def write_file(dest: Path, rel: str, content: bytes, executable: bool = False) -> Entry:
    """Write a generated file into the staging directory and return its entry."""
    path = dest / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    if executable:
        path.chmod(0o755)
    return Entry(rel, "exec" if executable else "file", path)
