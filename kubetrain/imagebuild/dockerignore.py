"""`.dockerignore` semantics, ported from Docker's own code (moby/patternmatcher and its ignorefile reader).

Not gitignore: a pattern is anchored at the context root (`foo` does not match `sub/foo`; write `**/foo`),
`*` and `?` never cross `/`, `**` matches any number of directories, a pattern that matches a directory
excludes everything below it, `!pattern` re-includes, and the last matching pattern wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubetrain.errors import BuildError

_REGEX_SPECIAL = set(".+()|{}$")


def go_clean(path: str) -> str:
    """Go's filepath.Clean for '/'-separated paths (posixpath.normpath differs on '//x' and '/..')."""
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    cleaned = "/".join(parts)
    if rooted:
        return "/" + cleaned
    return cleaned or "."


def parse_ignore_lines(text: str) -> list[str]:
    """Patterns from .dockerignore text: '#' comments (only at column 0), blank lines dropped, paths cleaned,
    a leading '/' removed; '!' is kept as the first character of exceptions."""
    patterns = []
    for number, raw in enumerate(text.splitlines()):
        line = raw.removeprefix("\ufeff") if number == 0 else raw
        if line.startswith("#"):
            continue
        pattern = line.strip()
        if not pattern:
            continue
        invert = pattern.startswith("!")
        if invert:
            pattern = pattern[1:].strip()
        if pattern:
            pattern = go_clean(pattern)
            if len(pattern) > 1 and pattern.startswith("/"):
                pattern = pattern[1:]
        patterns.append("!" + pattern if invert else pattern)
    return patterns


@dataclass(frozen=True)
class Pattern:
    """One compiled pattern: the cleaned text, whether it is an exception ('!'), and its regex."""

    text: str
    exclusion: bool
    regex: re.Pattern[str]

    def match(self, path: str) -> bool:
        return self.regex.match(path) is not None


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Docker's pattern → regex translation (patternmatcher.Pattern.compile), for '/'-separated paths."""
    out = ["^"]
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if in_class and ch not in "]\\":
            out.append("\\" + ch if ch in _REGEX_SPECIAL or ch == "[" else ch)
        elif ch == "*" and i + 1 < n and pattern[i + 1] == "*":
            i += 1
            if i + 1 < n and pattern[i + 1] == "/":
                i += 1  # treat "**/" as "**"
            out.append(".*" if i + 1 >= n else "(.*/)?")
        elif ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\":
            if i + 1 < n:
                i += 1
                out.append(re.escape(pattern[i]))
            else:
                out.append("\\\\")
        elif ch in "[]":
            in_class = ch == "["
            out.append(ch)
        else:
            out.append(re.escape(ch))
        i += 1
    out.append("$")
    return re.compile("".join(out), re.DOTALL)


class PatternMatcher:
    """Docker's PatternMatcher: ordered patterns; the last one that matches a path or a parent decides."""

    def __init__(self, patterns: list[str], source: str = ".dockerignore") -> None:
        self.patterns: list[Pattern] = []
        for text in patterns:
            exclusion = text.startswith("!")
            body = text[1:] if exclusion else text
            if exclusion and not body:
                raise BuildError(f"{source}: illegal exclusion pattern '!'")
            try:
                self.patterns.append(Pattern(body, exclusion, compile_pattern(body)))
            except re.error as exc:
                raise BuildError(f"{source}: invalid pattern {text!r}: {exc}") from None
        self.has_exclusions = any(p.exclusion for p in self.patterns)

    def excluded(self, path: str) -> bool:
        """Whether a '/'-separated path relative to the context is left out (MatchesOrParentMatches)."""
        matched = False
        parent = path.rsplit("/", 1)[0] if "/" in path else "."
        parent_dirs = parent.split("/")
        for pattern in self.patterns:
            if pattern.exclusion != matched:
                continue  # an inclusion cannot change a matched path, nor an exception an unmatched one
            hit = pattern.match(path)
            if not hit and parent != ".":
                hit = any(pattern.match("/".join(parent_dirs[: i + 1])) for i in range(len(parent_dirs)))
            if hit:
                matched = not pattern.exclusion
        return matched

    def decision(self, path: str) -> bool | None:
        """The last matching pattern's verdict on a path or a parent: excluded (True), re-included by an
        exception (False), or None when no pattern matches (for rules layered over other ignore files)."""
        result = None
        parent = path.rsplit("/", 1)[0] if "/" in path else "."
        parents = ["/".join(parent.split("/")[: i + 1]) for i in range(parent.count("/") + 1)] if parent != "." else []
        for pattern in self.patterns:
            if pattern.match(path) or any(pattern.match(p) for p in parents):
                result = not pattern.exclusion
        return result

    def must_walk(self, directory: str) -> bool:
        """Whether an excluded directory must still be walked: an exception pattern lies inside it."""
        if not self.has_exclusions:
            return False
        prefix = directory + "/"
        return any(p.exclusion and (p.text + "/").startswith(prefix) for p in self.patterns)
