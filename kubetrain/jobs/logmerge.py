"""Pure log plumbing, no cluster: split byte streams into whole lines, read the API's timestamps, drop lines
already seen after a reconnect, prefix and colour lines per replica, and merge several streams by time.

The API server prefixes each line with an RFC 3339 timestamp when asked (``timestamps=true``); kubetrain always
asks, so it can order lines from several pods and resume a cut stream without repeating a line. Timestamps
are turned into integer nanoseconds by kubetrain.kube.objects.time_ns (the shared time parsing).
"""

from __future__ import annotations

import codecs
import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kubetrain.kube.objects import time_ns

NO_TIME = -1  # the key of a line without a parseable timestamp
# Stable colours: master always cyan; the n-th worker/node always the n-th colour of this palette.
MASTER_STYLE = "bold cyan"
PALETTE = ("green", "yellow", "magenta", "blue", "bright_green", "bright_yellow", "bright_magenta",
           "bright_blue", "red", "bright_red", "bright_cyan", "white")


def split_timestamp(line: str) -> tuple[int, str, str]:
    """(nanoseconds since the epoch, the timestamp text, the rest) of ``2024-05-01T10:00:00.123Z text``.

    A line that does not start with a timestamp gets (NO_TIME, "", line).
    """
    space = line.find(" ")
    stamp = line[:space] if space > 0 else line
    key = time_ns(stamp)
    if key is None:
        return NO_TIME, "", line
    return key, stamp, line[space + 1:] if space > 0 else ""


class LineAssembler:
    """Bytes in (chunks cut anywhere, even inside a UTF-8 character), whole lines out."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk: bytes) -> list[str]:
        text = self._partial + self._decoder.decode(chunk)
        lines = text.split("\n")
        self._partial = lines.pop()
        return [line[:-1] if line.endswith("\r") else line for line in lines]

    @property
    def pending(self) -> str:
        """The partial line held back so far (a stream cut mid-line leaves one)."""
        return self._partial

    def discard(self) -> None:
        """Forget a partial line: the stream is re-opened and will send that line whole again."""
        self._decoder.reset()
        self._partial = ""

    def flush(self) -> list[str]:
        """The last line of a stream that ended without a newline (the stream is over for good)."""
        rest = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        return [rest] if rest else []


@dataclass
class Dedup:
    """Remembers the last timestamp emitted (and how many lines carried it), so a re-opened stream that
    starts earlier than where the cut happened only lets new lines through."""

    last: int = NO_TIME
    same: int = 0  # lines emitted with timestamp == last
    _seen_at_last: int = field(default=0, repr=False)

    def begin_replay(self) -> None:
        """A new connection for the same container starts: count lines at `last` again from zero."""
        self._seen_at_last = 0

    def accept(self, key: int) -> bool:
        if key == NO_TIME:
            return True
        if key < self.last:
            return False
        if key == self.last:
            self._seen_at_last += 1
            if self._seen_at_last <= self.same:
                return False
            self.same += 1
            return True
        self.last, self.same, self._seen_at_last = key, 1, 1
        return True


def style_for(label: str) -> str:
    """The rich style of a replica label: stable across runs and machines (no hashing of process state)."""
    role, _, index = label.rpartition("-")
    if not role:
        role, index = label, "0"
    if role == "master":
        return MASTER_STYLE
    number = int(index) if index.isdigit() else sum(label.encode())
    return PALETTE[number % len(PALETTE)]


class Prefixer:
    """``[worker-1] `` before each line, in the replica's colour when `color` is set (ANSI codes built once)."""

    def __init__(self, color: bool = False) -> None:
        self.color = color
        self._cache: dict[str, str] = {}

    def prefix(self, label: str) -> str:
        cached = self._cache.get(label)
        if cached is None:
            cached = f"[{label}] "
            if self.color:
                # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
                from rich.style import Style

                cached = Style.parse(style_for(label)).render(f"[{label}]") + " "
            self._cache[label] = cached
        return cached

    def format(self, label: str, text: str, stamp: str = "") -> str:
        if stamp:
            return f"{self.prefix(label)}{stamp} {text}"
        return self.prefix(label) + text


Source = tuple[str, Iterable[str]]
"""(replica label, its lines as the API returned them with timestamps=true), lazily or not."""


def parsed_lines(label: str, lines: Iterable[str], source: int = 0) -> Iterator[tuple[int, int, int, str, str, str]]:
    """(time key, source, order, label, timestamp text, line) per line: equal times keep the sources' order,
    then each stream's own order.

    A line without a timestamp takes the time of the line before it in the same stream.
    """
    last = NO_TIME
    for order, line in enumerate(lines):
        key, stamp, text = split_timestamp(line)
        if key == NO_TIME:
            key = last
        last = key
        yield key, source, order, label, stamp, text


def merge(sources: Iterable[Source], prefixer: Prefixer, timestamps: bool = False) -> Iterator[str]:
    """Every line of every source, prefixed, in time order (stable: same-time lines keep stream order).

    Lazy: with generators as sources, only one pending line per source is held in memory.
    """
    fmt = prefixer.format
    streams = (parsed_lines(label, lines, i) for i, (label, lines) in enumerate(sources))
    for _key, _source, _order, label, stamp, text in heapq.merge(*streams):
        yield fmt(label, text, stamp if timestamps else "")


def text_lines(text: str) -> list[str]:
    """The lines of a whole log text (a final newline ends the last line, it does not start another)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines
