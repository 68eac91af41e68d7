"""Writing a file the user named (a spec, a report) so that a reader never sees half of it."""

from __future__ import annotations

import contextlib
from pathlib import Path

from kubetrain.errors import UsageError


def write_atomically(path: Path, text: str) -> None:
    """Write to a temp file beside `path` and rename, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # on a read-only or full filesystem the clean-up can fail too
            tmp.unlink(missing_ok=True)
        raise UsageError(f"{path}: cannot write: {exc.strerror}") from None
