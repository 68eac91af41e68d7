"""Logs that outlive their pods: every replica's log (with rank 0's metrics lines) in `spec.archive`.

`spec.archive` is a directory (a volume's mountPath) or an fsspec URL (s3://, gs://, az://; the `s3` extra
installs s3fs). Layout, one directory per job and replica, parts numbered in order:

    <archive>/<job>/logs/<replica>/00000000.log, 00000001.log, ...

Object stores cannot append, so the log is written as parts while the job runs: a part is written when
PART_BYTES are buffered or FLUSH_SECONDS have passed, and on exit. The buffer is bounded (MAX_BUFFER):
the reader of the program's output never waits for the store; if the store falls that far behind, lines
are dropped and counted in the next part. A restarted container continues the numbering.

`kubetrain render`/`submit` record the location on the job as the annotation kubetrain.dev/archive, so
`kubetrain logs NAME` and `kubetrain metrics NAME` read the archive by themselves once the pods are gone
(kubetrain.jobs.logs); when the job itself is gone, `--archive URL` names it.

The writer is a thin wrapper around any command, so plain scripts are archived too:

    python -m kubetrain.observe.archive --url s3://bucket/runs --job NAME [--replica master-0] -- CMD...

It passes the command's output through unchanged (stdout, so `kubectl logs` still works), forwards
SIGTERM/SIGINT to it, writes the last part after the command exits and exits with its status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kubetrain.errors import UsageError
from kubetrain.objectstore import BackendMissing, url_filesystem

PART_BYTES = 1 << 20
FLUSH_SECONDS = 10.0
MAX_BUFFER = 8 << 20


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, root path) of an archive location."""
    try:
        return url_filesystem(url, "archive")
    except BackendMissing as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:
        raise UsageError(f"archive {url}: {exc}") from exc


class ArchiveWriter:
    """One replica's log, written in parts by a background thread; `line()` never blocks on the store."""

    def __init__(self, url: str, job: str, replica: str, flush_seconds: float = FLUSH_SECONDS,
                 max_buffer: int = MAX_BUFFER) -> None:
        self.fs, root = filesystem(url)
        self.dir = f"{root}/{job}/logs/{replica}"
        self.fs.makedirs(self.dir, exist_ok=True)  # a directory; nothing on an object store
        self.seq = len(_parts(self.fs, self.dir))
        self.flush_seconds, self.max_buffer = flush_seconds, max_buffer
        self.dropped = 0
        self._buffer: list[str] = []
        self._size = 0
        self._lock, self._write_lock = threading.Lock(), threading.Lock()
        self._wake, self._closed = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="archive", daemon=True)
        self._thread.start()

    def line(self, text: str) -> None:
        with self._lock:
            if self._size + len(text) + 1 > self.max_buffer:
                self.dropped += 1
                return
            self._buffer.append(text)
            self._size += len(text) + 1
            if self._size >= PART_BYTES:
                self._wake.set()

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Write what is buffered as the next part (nothing when the buffer is empty)."""
        with self._write_lock:
            with self._lock:
                lines, self._buffer, self._size = self._buffer, [], 0
                dropped, self.dropped = self.dropped, 0
            if dropped:
                lines.insert(0, f"[kubetrain archive: {dropped} line(s) dropped: the store fell behind]")
            if not lines:
                return
            with self.fs.open(f"{self.dir}/{self.seq:08d}.log", "wb") as part:
                part.write(("\n".join(lines) + "\n").encode("utf-8", "replace"))
            self.seq += 1

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=60)
        self.flush()


class NodeArchive:
    """`kubetrain run`: its merged `[node-N rank-R] text` lines into one archived log per node, then on to
    `then` (the renderer)."""

    def __init__(self, url: str, job: str, then: Callable[[str], None]) -> None:
        self.url, self.job, self.then = url, job, then
        self.writers: dict[str, ArchiveWriter] = {}

    def line(self, text: str) -> None:
        node = text[1:].split("]", 1)[0].split(" ", 1)[0] if text.startswith("[node-") else "kubetrain-run"
        writer = self.writers.get(node)
        if writer is None:
            writer = self.writers[node] = ArchiveWriter(self.url, self.job, node)
        writer.line(text)
        self.then(text)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def _parts(fs: Any, directory: str) -> list[str]:
    """The parts written so far, in order ([] before the first: an object store has no empty prefixes)."""
    try:
        return sorted(str(p) for p in fs.ls(directory, detail=False, refresh=True) if str(p).endswith(".log"))
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def _reading(url: str) -> Iterator[None]:
    """A store that cannot be read (credentials, network, permissions) as one line naming the archive."""
    try:
        yield
    except OSError as exc:  # s3fs/gcsfs/adlfs turn their clients' errors into OSError subclasses
        raise UsageError(f"archive {url}: cannot read it: {exc}") from None


def archived_replicas(url: str, job: str) -> list[tuple[str, Iterator[str]]]:
    """Every archived replica of `job` (name order) with its lines, read one part at a time as they are
    consumed (a long job's log is never held whole); [] if the job has no archive there."""
    fs, root = filesystem(url)
    base = f"{root}/{job}/logs"
    with _reading(url):
        if not fs.exists(base):
            return []
        found = [(str(p).rsplit("/", 1)[-1], _parts(fs, str(p))) for p in sorted(fs.ls(base, detail=False))]
    return [(replica, _part_lines(fs, url, parts)) for replica, parts in found if parts]


def _part_lines(fs: Any, url: str, parts: list[str]) -> Iterator[str]:
    for part in parts:
        with _reading(url):
            data = fs.cat_file(part)
        yield from data.decode("utf-8", "replace").splitlines()


def run_archived(command: Sequence[str], writer: ArchiveWriter) -> int:
    """Run `command`, its output (stdout + stderr) passed through to stdout and into the archive."""
    proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signum)  # the program checkpoints and exits; we keep archiving until it has

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    assert proc.stdout is not None
    out = sys.stdout.buffer
    for raw in iter(proc.stdout.readline, b""):
        out.write(raw)
        out.flush()
        writer.line(raw.decode("utf-8", "replace").rstrip("\r\n"))
    code = proc.wait()
    writer.close()
    return 128 - code if code < 0 else code


def replica_name(host: str, job: str, completion_index: str | None) -> str:
    """This pod's replica as `kubetrain logs` labels it (kubetrain.jobs.pods). A PyTorchJob pod's host name
    is its name: <job>-master-0 -> master-0. A JobSet (TrainJob) pod's is <job>-<replicatedJob>-<jobIndex>-
    <podIndex>, while its label is <replicatedJob>[-<jobIndex>]-<completionIndex>: node-0-1 -> node-1."""
    name = host.removeprefix(f"{job}-")
    parts = name.rsplit("-", 2)
    if completion_index is None or len(parts) != 3 or parts[2] != completion_index or not parts[1].isdigit():
        return name
    role = parts[0] if parts[1] == "0" else f"{parts[0]}-{parts[1]}"
    return f"{role}-{completion_index}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubetrain.observe.archive", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the archive: a directory or an fsspec URL")
    parser.add_argument("--job", required=True, help="the job's name")
    parser.add_argument("--replica", default=None,
                        help="this replica's name (default: the pod's name without the job's: master-0, worker-1)")
    parser.add_argument("--flush-seconds", type=float, default=FLUSH_SECONDS,
                        help="write a part at least this often while the command runs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run (put it after --)")
    replica = args.replica or replica_name(os.environ.get("HOSTNAME") or socket.gethostname(), args.job,
                                           os.environ.get("JOB_COMPLETION_INDEX"))
    try:
        writer = ArchiveWriter(args.url, args.job, replica, flush_seconds=args.flush_seconds)
    except (UsageError, OSError) as exc:
        print(f"error: archive {args.url}: {exc}", file=sys.stderr)
        return 2
    return run_archived(command, writer)


if __name__ == "__main__":
    sys.exit(main())
