"""Run external tools (docker, podman, kind, kubectl, helm...): quietly for checks, streamed for real work.

Streamed output goes to stderr line by line; the last lines are kept so a failure can be reported as one
headline plus the tool's own last words, never as a Python traceback.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from kubetrain.errors import KubetrainError

TAIL_LINES = 15
Echo = Callable[[str], None]


def echo_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class CommandFailed(KubetrainError):
    """A tool exited non-zero. `lines()` is a headline, the tool's last output lines, and an optional hint."""

    exit_code = 1

    def __init__(self, headline: str, tail: Sequence[str] = (), hint: str | None = None) -> None:
        self.headline, self.tail, self.hint = headline, list(tail), hint
        super().__init__(headline)

    def lines(self) -> list[str]:
        shown = [f"  | {line}" for line in self.tail if line.strip()]
        return [self.headline, *shown, *([self.hint] if self.hint else [])]


class ToolMissing(KubetrainError):
    """A required executable is not on PATH."""

    exit_code = 1


@dataclass(frozen=True)
class Captured:
    code: int
    stdout: str
    stderr: str


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def run_captured(argv: Sequence[str], *, stdin: str | None = None,
                 env: Mapping[str, str] | None = None) -> Captured:
    """Run quietly and return exit code and output (a missing executable is exit code 127)."""
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, errors="replace",
                              stdin=None if stdin is not None else subprocess.DEVNULL, env=_env(env),
                              check=False)
    except FileNotFoundError:
        return Captured(127, "", f"{argv[0]}: command not found")
    return Captured(done.returncode, done.stdout, done.stderr)


@dataclass
class StepTracker:
    """Follows a builder's output to name the step that failed (BuildKit, podman/buildah, legacy docker)."""

    headers: dict[str, str] = field(default_factory=dict)
    current: str | None = None
    failed: str | None = None

    _BUILDKIT = re.compile(r"^#(\d+) \[(?:[^\]\s]+ )?(\d+/\d+)\] (.+)$")
    _BUILDKIT_ERROR = re.compile(r"^#(\d+) ERROR:")
    _SUMMARY = re.compile(r"^ > \[(?:[^\]\s]+ )?(\d+/\d+)\] (.+):$")
    _STEP = re.compile(r"^(?:STEP|Step) (\d+/\d+) ?: (.+)$")

    def feed(self, line: str) -> None:
        if match := self._BUILDKIT.match(line):
            self.headers[match[1]] = self.current = f"{match[2]} {match[3]}"
        elif match := self._BUILDKIT_ERROR.match(line):
            self.failed = self.failed or self.headers.get(match[1])
        elif match := self._SUMMARY.match(line):
            self.failed = f"{match[1]} {match[2]}"
        elif match := self._STEP.match(line):
            self.current = f"{match[1]} {match[2]}"

    @property
    def step(self) -> str | None:
        return self.failed or self.current


def run_streamed(argv: Sequence[str], *, echo: Echo = echo_stderr, stdin: str | IO[bytes] | None = None,
                 env: Mapping[str, str] | None = None,
                 tracker: StepTracker | None = None) -> tuple[int, list[str]]:
    """Run with stdout+stderr streamed through `echo`; returns (exit code, last lines). `stdin`: text to
    write, or a pipe to read from."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    text = stdin if isinstance(stdin, str) else None
    source = subprocess.PIPE if isinstance(stdin, str) else subprocess.DEVNULL if stdin is None else stdin
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1, env=_env(env), stdin=source)
    except FileNotFoundError:
        raise ToolMissing(f"{argv[0]}: command not found on PATH") from None
    if text is not None and proc.stdin:
        proc.stdin.write(text)
        proc.stdin.close()
    assert proc.stdout is not None
    with proc.stdout:
        for raw in proc.stdout:
            line = raw.rstrip("\r\n")
            echo(line)
            tail.append(line)
            if tracker:
                tracker.feed(line)
    return proc.wait(), list(tail)


def check_streamed(argv: Sequence[str], what: str, *, echo: Echo = echo_stderr, stdin: str | None = None,
                   env: Mapping[str, str] | None = None, hint: str | None = None) -> None:
    """run_streamed, raising CommandFailed('<what> failed: `cmd` exited N') on a non-zero exit."""
    code, tail = run_streamed(argv, echo=echo, stdin=stdin, env=env)
    if code != 0:
        raise CommandFailed(f"{what} failed: `{command_line(argv)}` exited {code}", tail, hint)


def check_piped(first: Sequence[str], second: Sequence[str], what: tuple[str, str], *,
                echo: Echo = echo_stderr) -> None:
    """`first | second`, second's output streamed through `echo`; CommandFailed names `what[0]` when first
    fails (the cause, whatever second then says of a cut-off stream), else `what[1]` when second does."""
    with tempfile.TemporaryFile() as errors:
        try:
            producer = subprocess.Popen(list(first), stdout=subprocess.PIPE, stderr=errors,
                                        stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise ToolMissing(f"{first[0]}: command not found on PATH") from None
        assert producer.stdout is not None
        try:
            code, tail = run_streamed(second, echo=echo, stdin=producer.stdout)
        finally:
            producer.stdout.close()  # so that first gets SIGPIPE, not a full pipe, if second ended early
            produced = producer.wait()
        if produced != 0:
            errors.seek(0)
            lines = errors.read().decode(errors="replace").splitlines()[-TAIL_LINES:]
            raise CommandFailed(f"{what[0]} failed: `{command_line(first)}` exited {produced}", lines)
    if code != 0:
        raise CommandFailed(f"{what[1]} failed: `{command_line(second)}` exited {code}", tail)


def _env(extra: Mapping[str, str] | None) -> dict[str, str] | None:
    return {**os.environ, **extra} if extra else None
