""".env files for `kubetrain run --env-file`: KEY=VALUE lines. Values are secrets: never echo them."""

from __future__ import annotations

import re
from pathlib import Path

from kubetrain.errors import UsageError

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}


def _unquote(raw: str) -> str | None:
    """The value of `raw`: 'single' is literal, "double" knows \\n \\t \\" \\\\, bare drops a ` #comment`."""
    if raw[:1] == "'":
        end = raw.find("'", 1)
        return raw[1:end] if end > 0 and not raw[end + 1:].strip(" \t").lstrip("#") else None
    if raw[:1] == '"':
        out, index = [], 1
        while index < len(raw):
            char = raw[index]
            if char == "\\" and index + 1 < len(raw):
                out.append(_ESCAPES.get(raw[index + 1], "\\" + raw[index + 1]))
                index += 2
                continue
            if char == '"':
                rest = raw[index + 1:].strip(" \t")
                return "".join(out) if not rest or rest.startswith("#") else None
            out.append(char)
            index += 1
        return None
    return re.split(r"\s+#", raw, maxsplit=1)[0].strip()


def parse_env_text(text: str, source: str) -> dict[str, str]:
    """Parse .env text; a malformed line is an error naming file and line (not its content)."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(stripped)
        value = _unquote(match.group(2)) if match else None
        if match is None or value is None:
            raise UsageError(f"{source}:{number}: expected KEY=VALUE (value not shown)")
        values[match.group(1)] = value
    return values


def parse_env_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"--env-file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--env-file {path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_env_text(text, str(path))
