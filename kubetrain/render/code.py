"""Ship a local code directory with the job as a ConfigMap (read here; rendering stays pure)."""

from __future__ import annotations

import base64
import fnmatch
import functools
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kubetrain.errors import RenderError
from kubetrain.yamlsrc import CONFIGMAP_LIMIT

# Heavy directories of a training project that are never code: environments, checkpoints, run logs.
HEAVY_DIRS = ("venv", ".venv", "checkpoints", "wandb", "mlruns", "lightning_logs", "node_modules", ".tox", ".nox",
              "*.egg-info")
ALWAYS_EXCLUDED = (".git", ".hg", ".svn", "__pycache__", "*.pyc", ".kubetrain", ".mypy_cache", ".pytest_cache",
                   ".ruff_cache", ".ipynb_checkpoints", ".DS_Store", *HEAVY_DIRS)
IGNORE_FILE = ".kubetrainignore"
MAX_FILES = 2000  # every file is a key of the ConfigMap and an item of every pod template's code volume
_SPEC_MARK = b"kubetrain.dev/"  # in the first bytes of a YAML file: a kubetrain spec (this job's or another's)
_SPEC_PEEK = 4096
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
    """Read every file under `root` except the excluded ones; refuses a bundle over the ConfigMap limits.

    Left out: ALWAYS_EXCLUDED, `.kubetrainignore` and `exclude` globs, then (unless an `include` glob names the
    file) SECRET_PATTERNS, kubetrain spec files (YAML naming kubetrain.dev/: this job's and other jobs'
    specs are not code, and editing one must not change every job's code) and what the directory's
    `.gitignore` (git's rules, via pathspec) and `.dockerignore` (Docker's rules) leave out. Counts and
    sizes are checked from the file system's metadata before any file is read; a symlink that leaves
    `root` is refused by name (the pod would not have its target).
    """
    if not root.is_dir():
        raise RenderError(f"{field}: {root} is not a directory")
    patterns = [*ALWAYS_EXCLUDED, IGNORE_FILE, *exclude, *_ignore_file_patterns(root)]
    optional = _optional_exclusions(root)
    kept = []
    for path, size in _walk(root, patterns, field):
        if (optional(path) or _is_spec(root / path)) and not _excluded(path, list(include)):
            continue
        kept.append((path, size))
        if len(kept) > MAX_FILES:  # stop here: the rest of a 100,000-file tree need not be looked at
            raise RenderError(_too_many_message(kept, root, field))
    kept.sort()
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
    bundle = CodeBundle(tuple(files))
    if bundle.size > CONFIGMAP_LIMIT:  # a file grew while we read it
        raise RenderError(_too_large_message([(path, len(data)) for path, data in files], root, field))
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


def _walk(root: Path, patterns: list[str], field: str) -> Iterator[tuple[str, int]]:
    """(relative path, size) of every file not excluded, from stat alone."""
    resolved = root.resolve()
    for current, dirs, names in os.walk(root):
        rel_dir = Path(current).relative_to(root).as_posix()
        dirs[:] = [d for d in dirs if not _excluded(_join(rel_dir, d), patterns)]
        for name in dirs:  # os.walk does not follow them: one that leaves root is reported
            _check_link(Path(current) / name, _join(rel_dir, name), resolved, field)
        for name in names:
            rel = _join(rel_dir, name)
            if _excluded(rel, patterns):
                continue
            _check_link(Path(current) / name, rel, resolved, field)
            try:
                info = (Path(current) / name).stat()
            except OSError:
                continue  # a dangling symlink: nothing to ship
            if stat.S_ISREG(info.st_mode):
                yield rel, info.st_size


def _check_link(path: Path, rel: str, root: Path, field: str) -> None:
    if path.is_symlink() and not path.resolve().is_relative_to(root):
        raise RenderError(f"{field}: {rel} is a symlink to {os.readlink(path)}, outside {root}: the pod's code "
                          f"would not have it; copy it in, or exclude it in {IGNORE_FILE}")


def _is_spec(path: Path) -> bool:
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        with path.open("rb") as handle:
            return _SPEC_MARK in handle.read(_SPEC_PEEK)
    except OSError:
        return False


def _excluded(rel: str, patterns: list[str]) -> bool:
    """Whether a glob matches the path or one of its parts (fnmatch's rules, all globs in one regex)."""
    match = _globs(tuple(patterns)).match
    return bool(match(rel)) or any(match(part) for part in rel.split("/"))


@functools.lru_cache(maxsize=64)
def _globs(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)")


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
