"""Why a local run failed, in one line: the first failing rank, its node, the cause, and that rank's last log lines.

* The first failing rank is the first `kubetrain.runtime.launch: rank R exited with N` line of any agent (the
  launcher lists each node's root cause first).
* The cause: a full disk when the rank's output shows errno 28 (ENOSPC), else a signal when its status is
  128 + N; a SIGKILL is said to be the out-of-memory killer's when the cgroup's oom_kill counter rose during
  the run (cgroup v2 memory.events, v1 memory.oom_control), else "out of memory?" (the usual sender).
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections import deque
from dataclasses import dataclass, field

TAIL_LINES = 5  # log lines shown under the ending
KEPT_LINES = 200  # lines kept per rank, to find the cause in
ENOSPC = ("[Errno 28]", "No space left on device")
_FAILED = re.compile(r"rank (\d+) exited with (\d+)")
_TORCH_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ")  # torch's prefix on a worker's traceback lines


@dataclass
class RankFailure:
    node: int
    rank: int
    code: int
    lines: list[str] = field(default_factory=list)

    def cause(self, oom_killed: bool = False) -> str:
        """`ran out of disk space (ENOSPC)`, `was killed by SIGKILL (out of memory?)`, `failed first (exit code 1)`."""
        if any(marker in line for line in self.lines for marker in ENOSPC):
            return "ran out of disk space (ENOSPC: No space left on device)"
        if self.code > 128:
            name = _signal_name(self.code - 128)
            if self.code - 128 == signal.SIGKILL:
                return f"was killed by {name}" + (": out of memory (the kernel's OOM killer)" if oom_killed
                                                  else " (out of memory?)")
            return f"was {'stopped' if self.code - 128 in (signal.SIGTERM, signal.SIGINT) else 'killed'} by {name}"
        return f"failed first (exit code {self.code})"

    def tail(self) -> list[str]:
        """The rank's last non-blank lines, without torch's `[rankN]: ` prefix (the ending names the rank)."""
        return [_TORCH_RANK_PREFIX.sub("", line) for line in self.lines if line.strip()][-TAIL_LINES:]


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class RankTails:
    """The last lines of each rank's output and the first failed rank, fed by the supervisor's log readers."""

    def __init__(self) -> None:
        self.lines: dict[tuple[int, int], deque[str]] = {}
        self.first: tuple[int, int, int] | None = None  # (node, rank, exit code)

    def line(self, node: int, rank: int, text: str) -> None:
        self.lines.setdefault((node, rank), deque(maxlen=KEPT_LINES)).append(text)

    def failed(self, node: int, launcher_line: str) -> None:
        match = _FAILED.search(launcher_line)
        if match and self.first is None:
            self.first = (node, int(match.group(1)), int(match.group(2)))

    def first_failure(self) -> RankFailure | None:
        if self.first is None:
            return None
        node, rank, code = self.first
        return RankFailure(node, rank, code, list(self.lines.get((node, rank), [])))


def oom_kills() -> int | None:
    """The oom_kill counter of this process's memory cgroup (v2, else v1); None where it cannot be read."""
    for path, key in _memory_event_files():
        with contextlib.suppress(OSError, ValueError), open(path) as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    return None


def oom_killed_since(before: int | None) -> bool:
    """Whether the kernel's OOM killer killed a process of this cgroup since `oom_kills()` gave `before`."""
    after = oom_kills()
    return before is not None and after is not None and after > before


def _memory_event_files() -> list[tuple[str, str]]:
    try:
        with open("/proc/self/cgroup") as handle:
            entries = [line.rstrip("\n").split(":", 2) for line in handle]
    except OSError:
        return []
    files = []
    for _id, controllers, path in (entry for entry in entries if len(entry) == 3):
        if controllers == "":
            files.append((f"/sys/fs/cgroup{path.rstrip('/')}/memory.events", "oom_kill"))
        elif "memory" in controllers.split(","):
            files.append((f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control", "oom_kill"))
    return files
