"""The terminal view of a running job, shared by `kubetrain run`, `kubetrain logs -f` and `submit --follow`.

The job's merged output lines go in (`line()`, or `write()` as a text stream); what comes out:

* the user program's own lines on stdout, as they came (already prefixed `[node-1 rank-0]` / `[master-0]`);
* metrics lines (`KUBETRAIN_METRICS {json}`) swallowed into the ProgressTracker; on stdout only with `raw`;
* on a terminal (stderr is a TTY): one live line at the bottom (rich), redrawn at most REDRAW_SECONDS apart;
* otherwise: a plain human progress line on stderr at most every `interval` seconds (never JSON);
* at the end (`close()`): the last progress line and a summary table on stderr.

Cost per metrics line: one substring test, one orjson parse and a few float operations; drawing is
rate-limited by the clock. The renderer never makes the job wait on it: past BUSY_TRAIN train lines in one
REDRAW_SECONDS window (over 10k/s), the rest of that window's train lines are not parsed, only the newest
is kept (and parsed when the window ends), so a flood costs one substring test per line
(benchmarks/bench_progress.py). rich is imported only when a live line is drawn or the summary printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from kubetrain.metrics import PREFIX, parse_metrics_line
from kubetrain.observe.progress import ProgressTracker
from kubetrain.observe.summary import summary_rows, timeline_of

MARKER = PREFIX.strip()
REDRAW_SECONDS = 0.1  # the live line's fastest redraw
PLAIN_INTERVAL = 10.0  # seconds between plain progress lines when stderr is not a terminal
BUSY_TRAIN = 1000  # train lines parsed per REDRAW_SECONDS window; beyond that the window's lines are sampled
TRAIN_MARK = '{"kind":"train"'  # how format_metrics starts a train record (kind first, compact JSON)


class LineStream:
    """A write-only text stream that hands complete lines to `sink` (for code that wants a file)."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self._partial = ""

    def write(self, data: str) -> int:
        *lines, self._partial = (self._partial + data).split("\n")
        for line in lines:
            self.sink(line)
        return len(data)

    def flush(self) -> None:
        """Lines are handed on when complete; a partial line waits for its newline."""

    def isatty(self) -> bool:
        return False


class Renderer:
    """See the module docstring. Thread-safe: lines and notices may come from several threads."""

    def __init__(self, out: TextIO, err: TextIO, *, raw: bool = False, live: bool | None = None,
                 interval: float = PLAIN_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.out, self.err, self.raw, self.interval, self.clock = out, err, raw, interval, clock
        self.live = _isatty(err) if live is None else live
        self.tracker = ProgressTracker()
        self.started = time.time()  # the run's submission time for the timeline
        self.lines = 0
        self._lock = threading.Lock()
        self._view: Any = None  # rich.live.Live while the live line is shown
        self._drawn_at = float("-inf")
        self._shown: str | None = None
        self._closed = False
        self._window, self._window_lines = float("-inf"), 0  # see _sampled
        self._pending: str | None = None
        self.sampled = 0  # train lines not parsed because they came too fast (the newest one always is)
        self.stdout = LineStream(self.line)
        self.stderr = LineStream(self.notice)

    # --- input ----------------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        """One output line of the job (a log line or a metrics line)."""
        with self._lock:
            if self._closed:
                return
            self.lines += 1
            if MARKER in text and self._sampled(text):
                return
            if MARKER in text and (record := parse_metrics_line(text)) is not None:
                if self.raw:
                    self._write_out(text)
                if self.tracker.update(record):
                    self._progress(record.get("kind") == "eval")
                return
            self._write_out(text)

    def _sampled(self, text: str) -> bool:
        """True if this train line is only kept as the newest (not parsed): more than BUSY_TRAIN came in this
        window. The tracker's smoothed loss and mean samples/s then come from a sample of the records."""
        if TRAIN_MARK not in text:
            return False
        now = self.clock()
        if now - self._window >= REDRAW_SECONDS:
            self._window, self._window_lines = now, 0
            self._take_pending()
        self._window_lines += 1
        if self._window_lines <= BUSY_TRAIN:
            return False
        self._pending = text
        self.sampled += 1
        if self.raw:
            self._write_out(text)
        return True

    def _take_pending(self) -> None:
        if self._pending is not None and (record := parse_metrics_line(self._pending)) is not None:
            self.tracker.update(record)
        self._pending = None

    def notice(self, text: str) -> None:
        """A human message (waiting, events, restarts): stderr, above the live line."""
        with self._lock:
            if self._view is not None:
                self._view.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                self.err.write(text + "\n")
                self.err.flush()

    # --- output ---------------------------------------------------------------------------------------
    def _write_out(self, text: str) -> None:
        if self._view is not None and _isatty(self.out):
            # stdout and stderr share the terminal: print through rich so the live line stays at the bottom
            # (from_ansi keeps the coloured replica prefixes of `logs --color`)
            from rich.text import Text

            self._view.console.print(Text.from_ansi(text), soft_wrap=True)
            return
        try:
            self.out.write(text + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):  # the reader went away: keep following, quietly
            pass

    def _progress(self, important: bool) -> None:
        now = self.clock()
        if self.live:
            if now - self._drawn_at >= REDRAW_SECONDS:
                self._drawn_at = now
                self._draw(self.tracker.live_line() or "")
        elif now - self._drawn_at >= self.interval or (important and self._drawn_at == float("-inf")):
            self._drawn_at = now
            self._plain()

    def _plain(self) -> None:
        text = self.tracker.live_line()
        if text and text != self._shown:
            self._shown = text
            self.err.write(f"progress: {text}\n")
            self.err.flush()

    def _draw(self, text: str) -> None:
        # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
        from rich.text import Text

        if self._view is None:
            # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.err, force_terminal=True, highlight=False)
            self._view = Live(Text(text, style="bold"), console=console, auto_refresh=False, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._view.start()
        self._view.update(Text(text, style="bold"), refresh=True)

    def close(self, final: bool = True) -> None:
        """Stop the live line; print the last progress and (if metrics were seen) the summary table."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._take_pending()
            if self._view is not None:
                self._view.stop()
                self._view = None
            if not final or (self.tracker.last is None and self.tracker.eval is None):
                return
            self._plain()
            self._summary()

    def _summary(self) -> None:
        # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
        from rich.console import Console
        from rich.table import Table

        table = Table(title="training summary", show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        for key, value in summary_rows(self.tracker, self.started, time.time()):
            table.add_row(key, value)
        timeline = timeline_of(self.tracker, self.started, time.time())
        if timeline:
            table.add_row("timeline", timeline)
        Console(file=self.err, force_terminal=self.live, width=None if self.live else 120).print(table)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
