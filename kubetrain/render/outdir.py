"""`kubetrain render --out DIR`: one file per object and a kustomization.yaml, written so that rendering again
converges (GitOps: `render --out deploy && git diff --exit-code`).

DIR/.kubetrain-render lists the files kubetrain wrote there. A later render rewrites only files whose bytes
change, removes the listed files it no longer writes (a ConfigMap renamed by new code), leaves every other
file alone, and refuses to overwrite a file it did not write, a hand-written kustomization.yaml included.
The marker also keeps DIR out of every code ConfigMap and image context (kubetrain.imagebuild.selection).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from kubetrain.errors import UsageError
from kubetrain.imagebuild.selection import RENDER_MARKER

KUSTOMIZATION = "kustomization.yaml"
_HEADER = "# written by `kubetrain render --out`: the files kubetrain wrote here, removed when it no longer writes them"


def written_before(out_dir: Path) -> set[str]:
    """The names DIR's marker lists (empty without one)."""
    try:
        text = (out_dir / RENDER_MARKER).read_text(encoding="utf-8")
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise UsageError(f"{out_dir / RENDER_MARKER}: cannot read: {exc.strerror}") from None
    return {line.strip() for line in text.splitlines()
            if line.strip() and not line.startswith("#") and "/" not in line and not line.startswith("..")}


def write_out_dir(out_dir: Path, files: list[tuple[str, str]], label: str) -> list[str]:
    """Write `files` (name, text) into `out_dir` as described above; returns the names of stale files it
    removed. `label` is how the user spelled the directory, for messages."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {label}: cannot create: {exc.strerror}") from None
    mine = written_before(out_dir)
    for name, _ in files:
        if (out_dir / name).exists() and name not in mine:
            raise UsageError(_foreign(label, name))
    for name, text in files:
        _write_if_changed(out_dir / name, text)
    names = {name for name, _ in files}
    stale = sorted(mine - names)
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()
    _write_if_changed(out_dir / RENDER_MARKER, "\n".join([_HEADER, *sorted(names)]) + "\n")
    return stale


def _foreign(label: str, name: str) -> str:
    where = f"{label.rstrip('/')}/{name}"
    if name == KUSTOMIZATION:
        return (f"--out {label}: {where} was not written by kubetrain; render into a directory of its own (e.g. "
                f"{label.rstrip('/')}/kubetrain) and list that directory in your kustomization's resources")
    return f"--out {label}: {where} was not written by kubetrain; move it away or render into another directory"


def _write_if_changed(path: Path, text: str) -> None:
    """Unchanged bytes are not rewritten (no new mtime for make or a file watcher); changed ones are written
    to a temporary file beside `path` and renamed, so a reader never sees half a file."""
    data = text.encode("utf-8")
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # on a read-only or full filesystem the clean-up can fail too
            tmp.unlink(missing_ok=True)
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None
