"""What leaves the machine: one selection of a directory's files, shared by the image build context
(`kubetrain build`, and so `--push`), the code ConfigMap (`render`, `submit`) and so every archive of either.

Rules, in this order; for each path the last rule with an opinion decides, and `!pattern` re-includes:

1. kubetrain's defaults (DEFAULT_IGNORES: version control, caches, environments, checkpoints, run logs);
2. the directory's `.gitignore` (git's rules, via pathspec);
3. its `.dockerignore` (Docker's rules; for a Dockerfile of your own, `<Dockerfile>.dockerignore` beside it
   wins, as with BuildKit);
4. its `.kubetrainignore` (gitignore syntax);
5. the caller's own patterns (spec.code.exclude, then spec.code.include as re-inclusions).

Always left out: kubetrain's state (`.kubetrain/`), a directory `kubetrain render --out` wrote (it holds
RENDER_MARKER), and kubetrain spec files (YAML naming kubetrain.dev/ in its first bytes) unless re-included.
An excluded directory is not walked unless a re-inclusion names a path inside it (Docker's rule).

A file that looks like a secret (by name: SECRET_NAMES; by content: a private key header, a cloud
credential) and is still selected is refused, naming the file, unless a `!pattern` in `.kubetrainignore`
(or spec.code.include) re-includes it on purpose: SecretRefused.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from kubetrain.errors import BuildError, SecretRefused
from kubetrain.imagebuild.context import STATE_DIR, Entry
from kubetrain.imagebuild.dockerignore import PatternMatcher, parse_ignore_lines

KUBETRAIN_IGNORE = ".kubetrainignore"
RENDER_MARKER = ".kubetrain-render"  # the list of files `kubetrain render --out DIR` wrote into DIR
# Heavy directories of a training project that are never code: environments, checkpoints, run logs.
HEAVY_DIRS = ("venv", ".venv", "checkpoints", "wandb", "mlruns", "lightning_logs", "node_modules", ".tox", ".nox",
              "*.egg-info")
DEFAULT_IGNORES = (".git", ".hg", ".svn", "__pycache__", "*.pyc", STATE_DIR, ".mypy_cache", ".pytest_cache",
                   ".ruff_cache", ".ipynb_checkpoints", ".DS_Store", KUBETRAIN_IGNORE, *HEAVY_DIRS)
# Files that usually hold credentials, by name (fnmatch on the file name, or on the path when it has a '/').
SECRET_NAMES = (".env", ".env.*", "*.env", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk", "id_rsa",
                "id_dsa", "id_ecdsa", "id_ed25519", ".netrc", ".pypirc", ".npmrc", ".git-credentials",
                "credentials.json", "service-account*.json", "application_default_credentials.json",
                "*/.aws/credentials", ".aws/credentials", "*/.docker/config.json", ".docker/config.json",
                "*/.kube/config", ".kube/config")
SECRET_TEMPLATES = ("*.example", "*.sample", "*.template", "*.dist")  # `.env.example`: a committed template
# ... and by content: a private key's PEM header (also inside a service-account key's JSON), an AWS secret key
# with its 40-character value (a README that only names the setting is not refused).
_SECRET_CONTENT = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
                             rb"|aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])")
SECRET_SCAN_BYTES = 1 << 20  # files up to this size are read for secret content (a key file is small)
_SPEC_MARK = b"kubetrain.dev/"
_SPEC_PEEK = 4096
EXPLICIT = (KUBETRAIN_IGNORE, "spec.code.include")  # where a re-inclusion is a decision to ship the file


@dataclass(frozen=True)
class Selection:
    """The selected entries (sorted by path) and what was left out: (path, the rule's source); a directory
    left out as a whole ends with '/'."""

    entries: list[Entry]
    left_out: list[tuple[str, str]] = field(default_factory=list)
    unscanned: frozenset[str] = frozenset()  # files whose content the caller checks (select(content=False))
    truncated: bool = False  # the walk stopped at select's `limit`

    def refuse_secret_content(self, root: Path, contents: Iterable[tuple[str, bytes]]) -> None:
        """For select(content=False): check the content the caller read of the unscanned files."""
        found = [(path, why) for path, data in contents
                 if path in self.unscanned and (why := content_reason(data[:SECRET_SCAN_BYTES + 1]))]
        if found:
            raise SecretRefused(root, found)

    def left_out_summary(self, limit: int = 12) -> str:
        """e.g. `.git/ (kubetrain default), data/ (.gitignore), 3 more`."""
        shown = [f"{path} ({why})" for path, why in self.left_out[:limit]]
        if len(self.left_out) > limit:
            shown.append(f"{len(self.left_out) - limit} more")
        return ", ".join(shown)


class _Layer:
    """One ignore file (or pattern list): its opinion on a path is excluded (True), re-included (False) or none."""

    def __init__(self, name: str, decide: Callable[[str, bool], bool | None], negations: list[str]) -> None:
        self.name = name
        self.decide = decide
        self.negations = negations  # re-inclusion patterns, without '!' or a leading '/'


def _git_layer(name: str, lines: list[str]) -> _Layer:
    spec = pathspec.GitIgnoreSpec.from_lines(lines)

    def decide(rel: str, is_dir: bool) -> bool | None:
        result = spec.check_file(rel + "/" if is_dir else rel).include
        return None if result is None else bool(result)

    negations = [line.strip()[1:].lstrip("/") for line in lines if line.strip().startswith("!")]
    return _Layer(name, decide, negations)


def _docker_layer(name: str, patterns: list[str]) -> _Layer:
    matcher = PatternMatcher(patterns, name)
    return _Layer(name, lambda rel, _: matcher.decision(rel), [p.text for p in matcher.patterns if p.exclusion])


def _read_lines(path: Path) -> list[str] | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BuildError(f"{path}: cannot read: {exc.strerror}") from None


def dockerignore_file(root: Path, dockerfile: Path | None = None) -> Path | None:
    """`<Dockerfile name>.dockerignore` beside the Dockerfile (BuildKit) wins over `.dockerignore` in the root."""
    candidates = [dockerfile.with_name(dockerfile.name + ".dockerignore")] if dockerfile else []
    candidates.append(root / ".dockerignore")
    return next((candidate for candidate in candidates if candidate.is_file()), None)


def layers(root: Path, dockerfile: Path | None = None, exclude: tuple[str, ...] | list[str] = (),
           include: tuple[str, ...] | list[str] = ()) -> list[_Layer]:
    """The rules of the module docstring for `root`, in order."""
    found = [_git_layer("kubetrain default", list(DEFAULT_IGNORES))]
    if (lines := _read_lines(root / ".gitignore")) is not None:
        found.append(_git_layer(".gitignore", lines))
    if (docker := dockerignore_file(root, dockerfile)) is not None:
        text = "\n".join(_read_lines(docker) or [])
        found.append(_docker_layer(docker.name, parse_ignore_lines(text)))
    if (lines := _read_lines(root / KUBETRAIN_IGNORE)) is not None:
        found.append(_git_layer(KUBETRAIN_IGNORE, lines))
    if exclude:
        found.append(_git_layer("spec.code.exclude", list(exclude)))
    if include:
        found.append(_git_layer("spec.code.include", ["!" + pattern.lstrip("!") for pattern in include]))
    return found


@dataclass(frozen=True)
class _Verdict:
    excluded: bool
    source: str | None  # the deciding layer; None: no rule had an opinion
    explicit: bool  # re-included by a layer in EXPLICIT


def _judge(rules: list[_Layer], rel: str, is_dir: bool) -> _Verdict:
    verdict = _Verdict(False, None, False)
    for layer in rules:
        decided = layer.decide(rel, is_dir)
        if decided is not None:
            verdict = _Verdict(decided, layer.name, not decided and layer.name in EXPLICIT)
    return verdict


def select(root: Path, dockerfile: Path | None = None, exclude: tuple[str, ...] | list[str] = (),
           include: tuple[str, ...] | list[str] = (), skip: tuple[Path, ...] = (), content: bool = True,
           limit: int | None = None) -> Selection:
    """Walk `root` under the rules; `skip`: directories left out besides (e.g. render's --out). Raises
    SecretRefused naming every secret-looking file that would leave. `content=False` reads no file (names
    only); the caller then passes what it read to Selection.refuse_secret_content. With `limit`, the walk
    stops after limit + 1 files (a 100,000-file tree need not be walked to be refused): `truncated`."""
    rules = layers(root, dockerfile, exclude, include)
    walk = _Walk(root, rules, {str(path.resolve()) for path in skip})
    entries, files = [], 0
    for entry in walk.entries():
        entries.append(entry)
        files += entry.kind != "dir"
        if limit is not None and files > limit:
            return Selection(entries, sorted(walk.left_out), truncated=True)
    entries.sort(key=lambda entry: entry.path)
    secrets = walk.secrets
    if content:
        secrets += [(entry.path, why) for entry in entries if entry.path in walk.unscanned
                    and (why := content_reason(_head(entry.source)))]
    if secrets:
        raise SecretRefused(root, sorted(secrets))
    return Selection(entries, sorted(walk.left_out), frozenset() if content else frozenset(walk.unscanned))


class _Walk:
    def __init__(self, root: Path, rules: list[_Layer], skipped: set[str]) -> None:
        self.root = root
        self.rules = rules
        self.skipped = skipped
        self.negations = [n for layer in rules for n in layer.negations]
        self.left_out: list[tuple[str, str]] = []
        self.secrets: list[tuple[str, str]] = []
        self.unscanned: set[str] = set()  # selected files small enough to be read for secret content

    def entries(self, rel_dir: str = "") -> Iterator[Entry]:
        directory = self.root / rel_dir if rel_dir else self.root
        try:
            items = sorted(os.scandir(directory), key=lambda d: d.name)
        except OSError as exc:
            raise BuildError(f"{directory}: cannot list: {exc.strerror}") from None
        for item in items:
            rel = f"{rel_dir}/{item.name}" if rel_dir else item.name
            if item.is_dir(follow_symlinks=False):
                yield from self._directory(item, rel)
            else:
                yield from self._file(item, rel)

    def _directory(self, item: os.DirEntry[str], rel: str) -> Iterator[Entry]:
        why = self._always_out(item, rel)
        verdict = _judge(self.rules, rel, True)
        if why or (verdict.excluded and not self._reincluded_inside(rel)):
            self.left_out.append((rel + "/", why or str(verdict.source)))
            return
        children = list(self.entries(rel))
        if not children and not verdict.excluded:
            yield Entry(rel, "dir", Path(item.path))
        yield from children

    def _always_out(self, item: os.DirEntry[str], rel: str) -> str | None:
        if rel == STATE_DIR:
            return "kubetrain's state"
        if item.path in self.skipped or str(Path(item.path).resolve()) in self.skipped:
            return "render output"
        if os.path.exists(os.path.join(item.path, RENDER_MARKER)):
            return "render output"
        return None

    def _reincluded_inside(self, rel: str) -> bool:
        prefix = rel + "/"
        return any(negation.startswith(prefix) for negation in self.negations)

    def _file(self, item: os.DirEntry[str], rel: str) -> Iterator[Entry]:
        verdict = _judge(self.rules, rel, False)
        if verdict.excluded:
            self.left_out.append((rel, str(verdict.source)))
            return
        kind, size = _file_kind(item)
        if kind is None:
            return
        if not verdict.explicit and kind != "link" and _is_spec(Path(item.path)):
            self.left_out.append((rel, "a kubetrain spec"))
            return
        if not verdict.explicit:
            if reason := name_reason(rel):
                self.secrets.append((rel, reason))
            elif kind != "link" and size <= SECRET_SCAN_BYTES:
                self.unscanned.add(rel)
        yield Entry(rel, kind, Path(item.path), size)


def _file_kind(item: os.DirEntry[str]) -> tuple[str | None, int]:
    if item.is_symlink():
        return "link", 0
    info = item.stat(follow_symlinks=False)
    if not stat.S_ISREG(info.st_mode):
        return None, 0  # sockets, fifos, devices: Docker skips them too
    return ("exec" if info.st_mode & 0o111 else "file"), info.st_size


def _is_spec(path: Path) -> bool:
    if path.suffix not in (".yaml", ".yml"):
        return False
    try:
        with path.open("rb") as handle:
            return _SPEC_MARK in handle.read(_SPEC_PEEK)
    except OSError:
        return False


def name_reason(rel: str) -> str | None:
    """Why a file's name says it holds a secret (SECRET_NAMES), or None."""
    name = rel.rsplit("/", 1)[-1]
    if any(fnmatch.fnmatchcase(name, template) for template in SECRET_TEMPLATES):
        return None
    for pattern in SECRET_NAMES:
        if fnmatch.fnmatchcase(rel if "/" in pattern else name, pattern):
            return f"its name matches {pattern}"
    return None


def content_reason(data: bytes) -> str | None:
    """Why a file's content holds a secret (a private key header, a cloud credential), or None. The reason
    names the marker, never the secret."""
    found = _SECRET_CONTENT.search(data)
    if not found:
        return None
    marker = found.group().decode(errors="replace")
    return f"it holds {marker if marker.startswith('-----') else 'aws_secret_access_key with a value'}"


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(SECRET_SCAN_BYTES + 1)
    except OSError:
        return b""
