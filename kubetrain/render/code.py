"""Ship a local code directory with the job as a ConfigMap (read here; rendering stays pure)."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import RenderError
from kubetrain.imagebuild.selection import KUBETRAIN_IGNORE as IGNORE_FILE
from kubetrain.imagebuild.selection import Selection, select
from kubetrain.yamlsrc import CONFIGMAP_LIMIT

MAX_FILES = 2000  # every file is a key of the ConfigMap and an item of every pod template's code volume
_KEY_UNSAFE = re.compile(r"[^-._a-zA-Z0-9]")


@dataclass(frozen=True)
class CodeBundle:
    """The files of a code directory: relative POSIX path → bytes, sorted by path."""

    files: tuple[tuple[str, bytes], ...]

    @property
    def digest(self) -> str:
        sha = hashlib.sha256()
        for path, content in self.files:
            sha.update(path.encode() + b"\0" + hashlib.sha256(content).digest())
        return sha.hexdigest()

    @property
    def size(self) -> int:
        return sum(len(content) for _, content in self.files)


def collect_code(root: Path, exclude: list[str] | tuple[str, ...] = (), field: str = "spec.code.path",
                 include: list[str] | tuple[str, ...] = (), skip: tuple[Path, ...] = ()) -> CodeBundle:
    """Read every file under `root` that kubetrain.imagebuild.selection selects (the rule the image build
    context follows too), with `exclude` and `include` (spec.code.exclude/include) as its last rules and the
    directories `skip` (render's --out) left out; refuses a secret-looking file by name, and a bundle over the
    ConfigMap limits. Counts and sizes are checked from the file system's metadata before any file is read;
    a symlink that leaves `root` is refused by name (the pod would not have its target).
    """
    if not root.is_dir():
        raise RenderError(f"{field}: {root} is not a directory")
    selection = select(root, exclude=exclude, include=include, skip=skip, content=False, limit=MAX_FILES)
    kept = list(_shipped(root, selection, field))
    if selection.truncated or len(kept) > MAX_FILES:
        raise RenderError(_too_many_message(kept, root, field))
    if sum(size for _, size in kept) > CONFIGMAP_LIMIT:
        raise RenderError(_too_large_message(kept, root, field))
    files = []
    for path, _ in kept:
        if path.startswith(".."):  # validateLocalNonReservedPath: the kubelet's atomic writer owns '..' names
            raise RenderError(f"{field}: {path!r}: a file whose name starts with '..' cannot be mounted from a "
                              "ConfigMap (Kubernetes reserves such names); rename it or add it to spec.code.exclude")
        try:
            files.append((path, (root / path).read_bytes()))
        except OSError as exc:
            raise RenderError(f"{field}: cannot read {path}: {exc.strerror}") from None
    selection.refuse_secret_content(root, files)
    bundle = CodeBundle(tuple(files))
    if bundle.size > CONFIGMAP_LIMIT:  # a file grew while we read it
        raise RenderError(_too_large_message([(path, len(data)) for path, data in files], root, field))
    return bundle


def _shipped(root: Path, selection: Selection, field: str) -> Iterator[tuple[str, int]]:
    """(path, size) of the selected regular files; a symlink ships its target's content (one inside root)."""
    resolved = root.resolve()
    for entry in selection.entries:
        if entry.kind == "dir":
            continue
        if entry.kind == "link":
            _check_link(entry.source, entry.path, resolved, field)
            try:
                info = entry.source.stat()
            except OSError:
                continue  # a dangling symlink: nothing to ship
            if stat.S_ISREG(info.st_mode):
                yield entry.path, info.st_size
            continue
        yield entry.path, entry.size


def configmap_payload(bundle: CodeBundle) -> tuple[dict[str, str], dict[str, str], list[dict[str, str]]]:
    """(data, binaryData, items): ConfigMap keys cannot hold '/', so items map each key back to its path."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    items: list[dict[str, str]] = []
    used: set[str] = set()
    for path, content in bundle.files:
        key = _KEY_UNSAFE.sub("_", path.replace("/", "."))
        while key in used:
            key = "_" + key
        used.add(key)
        try:
            data[key] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[key] = base64.b64encode(content).decode("ascii")
        items.append({"key": key, "path": path})
    return data, binary, items


def _check_link(path: Path, rel: str, root: Path, field: str) -> None:
    if path.is_symlink() and not path.resolve().is_relative_to(root):
        raise RenderError(f"{field}: {rel} is a symlink to {os.readlink(path)}, outside {root}: the pod's code "
                          f"would not have it; copy it in, or exclude it in {IGNORE_FILE}")


def _too_large_message(files: list[tuple[str, int]], root: Path, field: str) -> str:
    total = sum(size for _, size in files)
    largest = sorted(files, key=lambda item: -item[1])[:3]
    listing = ", ".join(f"{path} ({size / 1024:.0f} KiB)" for path, size in largest)
    return (f"{field}: {root} holds {total / 2**20:.2f} MiB but a ConfigMap holds at most 1 MiB "
            f"(largest: {listing}{_heaviest(files, lambda size: size, ' KiB')}); exclude them in {IGNORE_FILE} "
            f"(one glob per line) or code.exclude, or bake the code into the image with `kubetrain build`")


def _too_many_message(files: list[tuple[str, int]], root: Path, field: str) -> str:
    return (f"{field}: {root} holds more than {MAX_FILES} files to ship "
            f"({_heaviest(files, lambda _: 1, ' files').removeprefix('; ')}); exclude them in {IGNORE_FILE} "
            f"(one glob per line, e.g. `data`) or code.exclude, or bake the code into the image with "
            f"`kubetrain build`")


def _heaviest(files: list[tuple[str, int]], weight: Callable[[int], int], unit: str) -> str:
    """The top-level directories with the most weight, e.g. `; most in: data/ (1200 files)`."""
    totals: dict[str, int] = {}
    for path, size in files:
        if "/" in path:
            top = path.split("/")[0] + "/"
            totals[top] = totals.get(top, 0) + weight(size)
    if not totals:
        return ""
    divisor = 1024 if unit == " KiB" else 1
    heaviest = sorted(totals.items(), key=lambda item: -item[1])[:3]
    return "; most in: " + ", ".join(f"{name} ({value / divisor:.0f}{unit})" for name, value in heaviest)
