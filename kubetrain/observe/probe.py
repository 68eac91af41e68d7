"""What `kubetrain stacks` runs inside each training pod (`python -c <this file's source>` over pods/exec).

It must run with the image's Python and nothing else (the CLI's kubetrain version may differ from the image's,
and a script job's image has none): stdlib only, no kubetrain import. File names follow kubetrain.observe.hang
(a test checks they agree). It prints one JSON document:

(`records` as argument: only the records and states, for `kubetrain status --hang`. `save DIR`: also copy the
progress directory's files (records, stacks, flight records, torch's own watchdog dumps) and this answer into
a new `DIR/hang-<UTC time>-<host>/`, for the controller on a hang; `saved` names it, or says why not.)

* `records`: every rank's progress record in $KUBETRAIN_PROGRESS_DIR;
* `dumps`: what each live rank appended to its stacks file after SIGUSR2 (faulthandler, kubetrain.runtime);
* `states`: /proc/PID/stat's state letter of each live rank after the wait (null: no such process);
* `flight`: each rank's newest flight-recorder entries (only the fields kubetrain.observe.stacks reads);
* `now`: the pod's clock (records are judged against it, not the caller's), `hang`: $KUBETRAIN_HANG.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

ANSWER_SECONDS = 3.0  # the ranks' writer threads answer flight-recorder requests every 2 s
UNRESPONSIVE = "TtDZX"
STOPPED = "Tt"  # never signalled: see signal_ranks
FR_FIELDS = ("collective_seq_id", "profiling_name", "state", "is_p2p")
FR_ENTRIES = 16
SAVED = ("rank-*.json", "stacks-rank-*.txt", "flight-recorder-rank-*.json", "fr-dump-rank-*")


def state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
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


def signal_ranks(pids: list[int]) -> None:
    """SIGUSR2 (faulthandler's stack dump) to each rank that is not stopped. A stopped process cannot answer, and
    the signal would stay pending until SIGCONT, then run faulthandler's dump of every thread just as all of
    them run again: CPython reads the other threads' frames without the GIL there, and that crashed the rank
    (SIGSEGV) when resumed."""
    for pid in pids:
        if state(pid) not in (None, *STOPPED):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR2)


def probe(where: str | Path, answer_seconds: float = ANSWER_SECONDS, ask: bool = True) -> dict[str, Any]:
    """ask=False (`kubetrain status --hang`): read the records and states only; no signal, no wait."""
    directory = Path(where)
    records = []
    for path in sorted(directory.glob("rank-*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    live = [r for r in records if r.get("phase") != "done" and "rank" in r and "pid" in r]
    offsets: dict[int, int] = {}
    ours: set[int] = set()
    for record in live:
        stacks = directory / f"stacks-rank-{record['rank']}.txt"
        offsets[record["rank"]] = stacks.stat().st_size if stacks.exists() else 0
        if is_rank(record["pid"], str(directory)):
            ours.add(record["rank"])
    if ask:
        signal_ranks([r["pid"] for r in live if r["rank"] in ours])
    requested = time.time()
    if live and ask:
        with contextlib.suppress(OSError):
            (directory / "flight-recorder.request").write_text(str(requested))
    responsive = [r for r in live if r["rank"] in ours and state(r["pid"]) not in (None, *UNRESPONSIVE)]
    deadline = time.monotonic() + (answer_seconds if ask else 0.0)
    while True:
        dumps = {r["rank"]: tail(directory / f"stacks-rank-{r['rank']}.txt", offsets[r["rank"]]) for r in live}
        records_fr = {r["rank"]: flight(directory / f"flight-recorder-rank-{r['rank']}.json", requested)
                      for r in live}
        if time.monotonic() > deadline or all(dumps[r["rank"]] and records_fr[r["rank"]] for r in responsive):
            break
        time.sleep(0.2)
    return {"now": time.time(), "hang": os.environ.get("KUBETRAIN_HANG"), "records": records,
            "dumps": {str(k): v for k, v in dumps.items()},
            "states": {str(r["rank"]): state(r["pid"]) if r["rank"] in ours else None for r in live},
            "flight": {str(k): v for k, v in records_fr.items() if v}}


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
