"""Every rank's Python stack, grouped, and the one-line verdict on a hung job.

Input: faulthandler dumps (a rank's writer thread answering a stacks request between two marker lines, which
are not frames; or, as the fallback, SIGUSR2: see kubetrain.runtime.heartbeat and kubetrain.observe.probe) and,
for a process that could not answer, its state from /proc/PID/stat (T stopped, D uninterruptible, Z zombie).
Ranks with the same training-thread stack are printed once; a stack that only a minority of ranks share is
an outlier and is printed first.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubetrain.observe.hang import Assessment, RankView

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$|^Stack \(most recent "
                     r"call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')
STATE_NAMES = {"T": "stopped", "t": "stopped by a debugger", "D": "in uninterruptible sleep (D)", "Z": "a zombie",
               "X": "dead"}
UNRESPONSIVE = frozenset("TtDZX")
STOPPED = frozenset("Tt")  # never sent SIGUSR2: kubetrain.observe.probe.signal_ranks says why


@dataclass(frozen=True)
class RankStack:
    """What one rank said (or why it could not)."""

    rank: RankView
    frames: tuple[str, ...] = ()  # the training thread, innermost first: `func (file.py:line)`
    threads: int = 0  # threads in the dump
    state: str | None = None  # /proc state letter when the process could not answer

    @property
    def answered(self) -> bool:
        return bool(self.frames)


def process_state(pid: int, proc: str = "/proc") -> str | None:
    """The state letter of /proc/PID/stat (R, S, D, T, Z ...), None if there is no such process."""
    try:
        with open(f"{proc}/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:][:1] or None  # the command name may contain spaces and parentheses


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def parse_dump(text: str) -> tuple[tuple[str, ...], int]:
    """(the training thread's frames, innermost first; number of threads) from one faulthandler dump. The
    training thread is the one that does not start in threading's _bootstrap (the main thread)."""
    threads: list[list[str]] = []
    for line in text.splitlines():
        if _THREAD.match(line):
            threads.append([])
        elif (match := _FRAME.match(line)) and threads:
            threads[-1].append(f"{match['func']} ({_short(match['file'])}:{match['line']})")
    main = [frames for frames in threads if frames and not frames[-1].startswith("_bootstrap ")]
    return (tuple(main[0]) if main else ()), len(threads)


def group(stacks: Sequence[RankStack]) -> list[tuple[tuple[str, ...], list[RankStack]]]:
    """Ranks that answered, by identical training-thread stack: smallest groups (outliers) first."""
    groups: dict[tuple[str, ...], list[RankStack]] = {}
    for stack in stacks:
        if stack.answered:
            groups.setdefault(stack.frames, []).append(stack)
    return sorted(groups.items(), key=lambda item: (len(item[1]), item[1][0].rank.rank))


def _ranks(stacks: Sequence[RankStack]) -> str:
    numbers = [s.rank.rank for s in stacks]
    return f"rank {numbers[0]}" if len(numbers) == 1 else "ranks " + ",".join(str(n) for n in numbers)


def describe_silent(stack: RankStack) -> str:
    state = stack.state
    if state in STATE_NAMES:
        what = STATE_NAMES[state] + (" (SIGSTOP?)" if state == "T" else "")
        return f"{stack.rank.label()} {what}, pid {stack.rank.pid}, state {state}"
    if state is None:
        return f"{stack.rank.label()} is gone (pid {stack.rank.pid})"
    return f"{stack.rank.label()} did not answer (pid {stack.rank.pid}, state {state}; holds the GIL?)"


def verdict(assessment: Assessment, stacks: Sequence[RankStack], clock: float | None = None) -> str:
    """`hung since 14:02:11 at step 1,234: rank 1 (node 2) stopped (SIGSTOP?), pid 77, state T; 1 rank
    waits in all_reduce (distributed_c10d.py:2950)`."""
    since = time.strftime("%H:%M:%S", time.localtime(assessment.since or clock or time.time()))
    parts = [describe_silent(s) for s in stacks if not s.answered]
    if not parts:
        parts = [f"{s.label()} is behind at step {s.step:,}" for s in assessment.behind]
    for frames, members in group(stacks):
        verb = "waits" if len(members) == 1 else "wait"
        count = f"{len(members)} rank{'s' if len(members) > 1 else ''}"
        parts.append(f"{count} {verb} in {frames[0]}")
    if assessment.missing:
        parts.append(f"no record from {_ranks_numbers(assessment.missing)}")
    head = f"hung since {since} at step {assessment.step:,} (no progress for over {assessment.limit:.0f} s, " \
           f"phase {assessment.phase})"
    return head + (": " + "; ".join(parts) if parts else "")


def _ranks_numbers(numbers: Sequence[int]) -> str:
    return f"rank {numbers[0]}" if len(numbers) == 1 else "ranks " + ",".join(str(n) for n in numbers)


def render(stacks: Sequence[RankStack], depth: int = 12) -> list[str]:
    """The grouped stacks as text lines: outliers first, then each distinct stack once."""
    lines: list[str] = []
    groups = group(stacks)
    largest = max((len(members) for _, members in groups), default=0)
    for frames, members in groups:
        mark = "OUTLIER " if len(groups) > 1 and len(members) < largest else ""
        nodes = sorted({m.rank.node for m in members})
        lines.append(f"--- {mark}{_ranks(members)} (node {','.join(map(str, nodes))}): training thread, "
                     f"innermost first ({members[0].threads} threads)")
        lines += [f"    {frame}" for frame in frames[:depth]]
        if len(frames) > depth:
            lines.append(f"    ... {len(frames) - depth} more frames")
    for stack in stacks:
        if not stack.answered:
            lines.append(f"--- {describe_silent(stack)}: no stack (a stopped or uninterruptible process cannot run "
                         "its signal handler)")
    return lines


def collect(ranks: Sequence[RankView], dumps: Mapping[int, str], states: Mapping[int, str | None]) -> list[RankStack]:
    """RankStacks from the dump text each rank appended after the signal (may be empty) and its process
    state."""
    result = []
    for rank in sorted(ranks, key=lambda r: r.rank):
        frames, threads = parse_dump(dumps.get(rank.rank, ""))
        result.append(RankStack(rank, frames, threads, None if frames else states.get(rank.rank)))
    return result


def flight_recorder_summary(records: Mapping[int, Mapping[str, Any]], world_size: int,
                            ranks: Collection[int] | None = None) -> str | None:
    """Which collective the ranks wait in, and who never entered it, from torch's flight recorder dumps
    (`_dump_fr_trace_json`: entries with collective_seq_id, profiling_name, state). None without records.
    `ranks`: the ranks that were asked (default: the whole world)."""
    newest: dict[int, tuple[int, str, str]] = {}
    for rank, record in records.items():
        entries = [e for e in record.get("entries") or [] if not e.get("is_p2p")]
        if entries:
            entry = max(entries, key=lambda e: int(e.get("collective_seq_id", 0)))
            newest[rank] = (int(entry.get("collective_seq_id", 0)), str(entry.get("profiling_name", "?")),
                            str(entry.get("state", "?")))
    if not newest:
        return None
    top = max(seq for seq, _, _ in newest.values())
    name = next(n for seq, n, _ in newest.values() if seq == top)
    inside = sorted(r for r, (seq, _, state) in newest.items() if seq == top and state != "completed")
    missing = sorted(r for r in (range(world_size) if ranks is None else ranks)
                     if r not in newest or newest[r][0] < top)
    text = f"flight recorder: {_ranks_numbers(inside)} in {name} #{top:,}" if inside else \
        f"flight recorder: newest collective {name} #{top:,} completed"
    if missing:
        text += f"; {_ranks_numbers(missing)} never entered it"
    return text
