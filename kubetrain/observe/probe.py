"""What `kubetrain stacks` runs inside each training pod (`python -c <this file's source>` over pods/exec).

It must run with the image's Python and nothing else (the CLI's kubetrain version may differ from the image's,
and a script job's image has none): stdlib only, no kubetrain import. File names follow kubetrain.observe.hang
(a test checks they agree). It prints one JSON document:

(`records` as argument: only the records and states, for `kubetrain status --hang`. `save DIR`: also copy the
progress directory's files (records, stacks, flight records, torch's own watchdog dumps) and this answer into
a new `DIR/hang-<UTC time>-<host>/`, for the controller on a hang; `saved` names it, or says why not.)

* `records`: every rank's progress record in $KUBETRAIN_PROGRESS_DIR;
* `dumps`: each live rank's stacks (faulthandler's text): its writer thread's answer to a stacks request, or
  for a rank that did not answer within ANSWER_SECONDS and is not stopped, what SIGUSR2 made it append;
* `states`: /proc/PID/stat's state letter of each live rank after the wait (null: no such process);
* `flight`: each rank's newest flight-recorder entries (only the fields kubetrain.observe.stacks reads);
* `now`: the pod's clock (records are judged against it, not the caller's), `hang`: $KUBETRAIN_HANG.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ANSWER_SECONDS = 3.0  # the ranks' writer threads look for requests every 0.2 s
FALLBACK_SECONDS = 1.0  # SIGUSR2's dump comes from the signal handler, at once
STACKS_REQUEST = "stacks.request"
ANSWER = "kubetrain: stacks on request "
ANSWERED = "kubetrain: end of stacks on request "
_ANSWER = re.compile(rf"^{re.escape(ANSWER)}(\d+)\n.*?^{re.escape(ANSWERED)}\1\n", re.S | re.M)
UNRESPONSIVE = "TtDZX"
STOPPED = "Tt"  # never signalled: see signal_ranks
FR_FIELDS = ("collective_seq_id", "profiling_name", "state", "is_p2p")
FR_ENTRIES = 16
SAVED = ("rank-*.json", "stacks-rank-*.txt", "flight-recorder-rank-*.json", "fr-dump-rank-*")


def state(pid: int, proc: str = "/proc") -> str | None:
    try:
        with open(f"{proc}/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:][:1] or None


def is_rank(pid: int, directory: str) -> bool:
    """True when PID is a process that writes into this progress directory (never signal a reused PID)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read().split(b"\0")
    except OSError:
        return False
    return f"KUBETRAIN_PROGRESS_DIR={directory}".encode() in environ


def tail(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def flight(path: Path, requested: float) -> dict[str, Any] | None:
    try:
        if path.stat().st_mtime < requested - 1:
            return None
        entries = json.loads(path.read_bytes()).get("entries") or []
    except (OSError, ValueError, AttributeError):
        return None
    entries = sorted(entries, key=lambda e: int(e.get("collective_seq_id", 0)))[-FR_ENTRIES:]
    return {"entries": [{k: e.get(k) for k in FR_FIELDS} for e in entries]}


def signal_ranks(pids: list[int]) -> list[int]:
    """SIGUSR2 (faulthandler's stack dump) to each rank that is not stopped; the PIDs signalled. A stopped
    process cannot answer, and the signal would stay pending until SIGCONT, then run faulthandler's dump of
    every thread just as all of them run again: CPython reads the other threads' frames without the GIL there,
    and that crashed the rank (SIGSEGV) when resumed."""
    signalled = []
    for pid in pids:
        if state(pid) not in (None, *STOPPED):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR2)
                signalled.append(pid)
    return signalled


def request(directory: Path, name: str) -> None:
    """Replace the request file: a new inode, so the writer threads tell two requests apart even within one tick
    of the file system's clock."""
    temp = directory / f".{name}.{os.getpid()}"
    with contextlib.suppress(OSError):
        temp.write_text(f"{time.time()}\n")
        os.replace(temp, directory / name)


def last_answer(text: str) -> str:
    """The last complete answer of a writer thread in `text` (its marker lines included), '' if none."""
    found = list(_ANSWER.finditer(text))
    return found[-1].group(0) if found else ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def ask_stacks(directory: Path, pids: Mapping[int, int], answer_seconds: float = ANSWER_SECONDS,
               also: Callable[[], bool] = lambda: True) -> dict[int, str]:
    """Each rank's new stacks (`pids`: rank -> pid, only processes of this progress directory). The ranks' writer
    threads answer a stacks request with faulthandler while holding the GIL, so no other thread of the rank
    runs Python meanwhile. Only a rank that did not answer within `answer_seconds` and is not stopped (its
    writer cannot run: another thread holds the GIL, and then none runs Python) gets SIGUSR2, and up to
    FALLBACK_SECONDS more. `also`: what else the caller waits for (the flight records)."""
    paths = {rank: directory / f"stacks-rank-{rank}.txt" for rank in pids}
    offsets = {rank: _size(path) for rank, path in paths.items()}
    request(directory, STACKS_REQUEST)
    deadline = time.monotonic() + answer_seconds
    while True:
        dumps = {rank: last_answer(tail(paths[rank], offsets[rank])) for rank in pids}
        can_run = [rank for rank, pid in pids.items() if state(pid) not in (None, *UNRESPONSIVE)]
        if time.monotonic() > deadline or (all(dumps[rank] for rank in can_run) and also()):
            break
        time.sleep(0.2)
    signalled = set(signal_ranks([pid for rank, pid in pids.items() if not dumps[rank]]))
    late = {rank: pid for rank, pid in pids.items() if pid in signalled}
    deadline = time.monotonic() + FALLBACK_SECONDS
    while late:
        resting = {rank for rank, pid in late.items() if at_rest(pid)}  # before the text: see at_rest
        for rank in list(late):
            text = tail(paths[rank], offsets[rank])
            if last_answer(text) or (rank in resting and text.endswith("\n")) or time.monotonic() > deadline:
                dumps[rank] = last_answer(text) or text
                del late[rank]
        if late:
            time.sleep(0.1)
    return dumps


def at_rest(pid: int) -> bool:
    """True when no thread of PID runs (all sleep, or it is gone), so no signal handler is writing. faulthandler
    writes a dump in many small writes and no end marker, and the scheduler can stop it between two. SIGUSR2
    wakes a sleeping thread to run the handler, so a dump read after every thread was seen asleep is whole. A
    rank busy in C (always running) waits for the deadline."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return all(state(int(task), f"/proc/{pid}/task") in (None, "S") for task in tasks)


def probe(where: str | Path, answer_seconds: float = ANSWER_SECONDS, ask: bool = True) -> dict[str, Any]:
    """ask=False (`kubetrain status --hang`): read the records and states only; no request, no signal, no wait."""
    directory = Path(where)
    records = []
    for path in sorted(directory.glob("rank-*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    live = [r for r in records if r.get("phase") != "done" and "rank" in r and "pid" in r]
    ours = {r["rank"]: r["pid"] for r in live if is_rank(r["pid"], str(directory))}
    requested = time.time()

    def flights() -> dict[int, dict[str, Any] | None]:
        return {r["rank"]: flight(directory / f"flight-recorder-rank-{r['rank']}.json", requested) for r in live}

    def flown() -> bool:  # every rank that can run answered (its records, or none: FR_NONE)
        found = flights()
        return all(found[rank] is not None for rank, pid in ours.items() if state(pid) not in (None, *UNRESPONSIVE))

    dumps: dict[int, str] = {r["rank"]: "" for r in live}
    if ours and ask:
        with contextlib.suppress(OSError):
            (directory / "flight-recorder.request").write_text(str(requested))
        dumps.update(ask_stacks(directory, ours, answer_seconds, flown))  # not |=: the image's Python may be 3.8
    records_fr = flights()
    return {"now": time.time(), "hang": os.environ.get("KUBETRAIN_HANG"), "records": records,
            "dumps": {str(k): v for k, v in dumps.items()},
            "states": {str(r["rank"]): state(r["pid"]) if r["rank"] in ours else None for r in live},
            "flight": {str(k): v for k, v in records_fr.items() if v and v["entries"]}}


def save(where: str | Path, answer: dict[str, Any], into: str) -> str:
    """Copy the evidence into a new directory under `into`; its path, or `error: ...`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = Path(into) / f"hang-{stamp}-{socket.gethostname()}"
    try:
        target.mkdir(parents=True, exist_ok=True)
        for pattern in SAVED:
            for path in sorted(Path(where).glob(pattern)):
                shutil.copyfile(path, target / path.name)
        (target / "probe.json").write_text(json.dumps(answer))
    except OSError as exc:
        return f"error: {target}: {exc.strerror or exc}"
    return str(target)


if __name__ == "__main__":
    where = os.environ.get("KUBETRAIN_PROGRESS_DIR") or "/tmp/kubetrain-progress"
    args = sys.argv[1:]
    answer = probe(where, ask=args != ["records"])
    if args[:1] == ["save"] and len(args) == 2:
        answer["saved"] = save(where, answer, args[1])
    print(json.dumps(answer))
