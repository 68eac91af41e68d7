"""Ship a local code directory with the job as a ConfigMap (read here; rendering stays pure)."""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import RenderError
from kubetrain.yamlsrc import CONFIGMAP_LIMIT

ALWAYS_EXCLUDED = (".git", ".hg", ".svn", "__pycache__", "*.pyc", ".venv", ".kubetrain", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".DS_Store")
IGNORE_FILE = ".kubetrainignore"
# Files that usually hold credentials: never shipped unless `code.include` names them (a ConfigMap is readable
# by anyone who may read the namespace's ConfigMaps, and it lands in etcd unencrypted by default).
SECRET_PATTERNS = (".env", ".env.*", "*.env", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.crt",
                   "*.cer", "*.der", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".netrc", ".pypirc",
                   ".npmrc", ".git-credentials", "credentials.json", "service-account*.json")
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
                 include: list[str] | tuple[str, ...] = ()) -> CodeBundle:
    """Read every file under `root` except the excluded ones; refuses a bundle over the ConfigMap limit.

    Left out: ALWAYS_EXCLUDED, `.kubetrainignore` and `exclude` globs, then (unless an `include` glob names the
    file) SECRET_PATTERNS and what the directory's `.gitignore` (git's rules, via pathspec) and
    `.dockerignore` (Docker's rules) leave out.
    """
    if not root.is_dir():
        raise RenderError(f"{field}: {root} is not a directory")
    patterns = [*ALWAYS_EXCLUDED, IGNORE_FILE, *exclude, *_ignore_file_patterns(root)]
    optional = _optional_exclusions(root)
    files = []
    for path in sorted(_walk(root, patterns)):
        if optional(path) and not _excluded(path, list(include)):
            continue
        if path.startswith(".."):  # validateLocalNonReservedPath: the kubelet's atomic writer owns '..' names
            raise RenderError(f"{field}: {path!r}: a file whose name starts with '..' cannot be mounted from a "
                              "ConfigMap (Kubernetes reserves such names); rename it or add it to spec.code.exclude")
        try:
            files.append((path, (root / path).read_bytes()))
        except OSError as exc:
            raise RenderError(f"{field}: cannot read {path}: {exc.strerror}") from None
    bundle = CodeBundle(tuple(files))
    if bundle.size > CONFIGMAP_LIMIT:
        raise RenderError(_too_large_message(bundle, root, field))
    return bundle


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


def _walk(root: Path, patterns: list[str]) -> list[str]:
    found = []
    for current, dirs, names in os.walk(root):
        rel_dir = Path(current).relative_to(root).as_posix()
        dirs[:] = [d for d in dirs if not _excluded(_join(rel_dir, d), patterns)]
        for name in names:
            rel = _join(rel_dir, name)
            full = Path(current) / name
            if full.is_file() and not _excluded(rel, patterns) and _inside(full, root):
                found.append(rel)
    return found


def _excluded(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    return any(fnmatch.fnmatch(rel, p) or any(fnmatch.fnmatch(part, p) for part in parts) for p in patterns)


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def _join(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir}/{name}"


def _optional_exclusions(root: Path) -> Callable[[str], bool]:
    """Whether a relative path is left out by the secret defaults, `.gitignore` or `.dockerignore`."""
    import pathspec

    from kubetrain.imagebuild.dockerignore import PatternMatcher, parse_ignore_lines

    gitignore = pathspec.GitIgnoreSpec.from_lines(_read_lines(root / ".gitignore"))
    dockerignore = PatternMatcher(parse_ignore_lines("\n".join(_read_lines(root / ".dockerignore"))))
    return lambda rel: (_excluded(rel, list(SECRET_PATTERNS)) or gitignore.match_file(rel)
                        or dockerignore.excluded(rel))


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _ignore_file_patterns(root: Path) -> list[str]:
    ignore = root / IGNORE_FILE
    if not ignore.is_file():
        return []
    lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    return [line.strip().rstrip("/") for line in lines if line.strip() and not line.startswith("#")]


def _too_large_message(bundle: CodeBundle, root: Path, field: str) -> str:
    largest = sorted(bundle.files, key=lambda f: -len(f[1]))[:3]
    listing = ", ".join(f"{path} ({len(content) / 1024:.0f} KiB)" for path, content in largest)
    return (f"{field}: {root} holds {bundle.size / 2**20:.2f} MiB but a ConfigMap holds at most 1 MiB "
            f"(largest: {listing}); exclude files in {IGNORE_FILE} or bake the code into the image "
            f"with `kubetrain build`")
