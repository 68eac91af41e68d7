"""`python -m kubetrain.runtime.launch [torchrun options] PROGRAM...`: torchrun whose exit code tells the truth.

torchrun exits 1 whenever a worker fails, and with a traceback (also 1) when it is itself stopped by a
signal. As a pod's main process that turns a preemption (workers checkpoint and exit 143) into what
`restartPolicy: ExitCode` treats as a permanent failure. This launcher runs torchrun in-process (same
options, same PET_* handling) and exits with:

* 128 + signal when the agent itself was stopped by SIGTERM/SIGINT (143/130), after torchrun has shut its
  workers down (they write their stop checkpoint);
* the exit code of the first failed worker otherwise (its root cause, by time), a death by signal N as
  128 + N: workers that stopped after a good checkpoint give 143, a configuration error 2, a crash 1;
* 0 when every worker succeeded.

In a local run (`kubetrain run`), node 1's launcher also starts the rendezvous store (STORE_HOST_ENV).
torchrun's own c10d host is the agent that hosts it, and that agent exits as soon as it is done, while another
agent may still be closing the rendezvous or sending it a keep-alive: that agent then printed a C++
`recvVector failed` trace and a RendezvousConnectionError under a successful run. So every agent is a client
(`is_host=0`), and the store lives in a process forked from this one once torch is imported (no import of its
own: about 1.7 s of CPU less per run than a `python` process of its own), detached from the agent, until
`kubetrain run` closes the pipe it passed (STORE_HOLD_FD_ENV) after every agent has exited, or dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

from kubetrain.podenv import FAILED_RANK, LAUNCH_TMPDIR_ENV, STORE_HOLD_FD_ENV, STORE_HOST_ENV, STORE_PROCESS_NAME

PR_SET_NAME = 15


def worker_exit_code(exitcode: int) -> int:
    """A worker's status as a shell would report it: a death by signal N (negative) is 128 + N."""
    return 128 - exitcode if exitcode < 0 else exitcode


def failure_exit_code(error: Any) -> int:
    """The exit code for torchrun's ChildFailedError: its first (root-cause) failure's code, never 0."""
    _rank, failure = error.get_first_failure()
    return worker_exit_code(int(failure.exitcode)) or 1


def failure_lines(error: Any, log_dir: str | None) -> list[str]:
    """One line per failed rank of torchrun's ChildFailedError, with the rank's stderr file when --log-dir
    keeps one (torchrun writes LOG_DIR/<run id>_<suffix>/attempt_<n>/<local rank>/stderr.log). The first
    failure (the root cause, by time) comes first, then the others by rank."""
    lines = []
    first, _failure = error.get_first_failure()
    for rank, failure in sorted(error.failures.items(), key=lambda item: (item[0] != first, item[0])):
        logs = glob.glob(os.path.join(glob.escape(log_dir), "*", "attempt_*", str(failure.local_rank),
                                      "stderr.log")) if log_dir else []
        where = f"; log: {max(logs, key=os.path.getmtime)}" if logs else ""
        lines.append(f"{FAILED_RANK}{rank} exited with {worker_exit_code(int(failure.exitcode))}{where}")
    return lines


# Options `kubetrain run` passes that an older torchrun lacks: torch 2.11's has no --shutdown-timeout and takes
# the log-line prefix only from the environment (argparse exit 2 on an H200 with torch 2.11: docs/gpu.md).
PREFIX_ENV = {"--log-line-prefix-template": "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"}


def for_this_torchrun(argv: list[str], takes_value: dict[str, bool]) -> tuple[list[str], dict[str, str], list[str]]:
    """argv for the installed torchrun (`takes_value`: its options), the environment replacing options it lacks,
    and the options dropped. Everything from the program on is passed as it is."""
    out: list[str] = []
    env: dict[str, str] = {}
    dropped: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        name, eq, value = argv[i].partition("=")
        known = takes_value.get(name)
        width = 1 if eq or known is False else 2  # an unknown option takes one value, as all of ours do
        if known is None:
            value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if name in PREFIX_ENV:
                env[PREFIX_ENV[name]] = value
            else:
                dropped.append(name)
        else:
            out += argv[i:i + width]
        i += width
    return out + argv[i:], env, dropped


def _options(parser: Any) -> dict[str, bool]:
    return {flag: action.nargs != 0 for action in parser._actions for flag in action.option_strings}


@contextlib.contextmanager
def own_tempdir() -> Iterator[None]:
    """This process's temporary files go to a directory of its own, removed when torchrun returns: without
    --log-dir, torchrun keeps its workers' tee'd output in `tempfile.mkdtemp(prefix="torchelastic_")` and never
    removes it, which left one directory with every rank's output per run in /tmp. Under `kubetrain run` it
    is made in the run's directory (LAUNCH_TMPDIR_ENV), which the run removes even after a SIGKILL. The
    workers (processes of their own) keep TMPDIR as it is."""
    scratch = tempfile.mkdtemp(prefix="kubetrain-launch-", dir=os.environ.pop(LAUNCH_TMPDIR_ENV, None))
    previous, tempfile.tempdir = tempfile.tempdir, scratch
    try:
        yield
    finally:
        tempfile.tempdir = previous
        shutil.rmtree(scratch, ignore_errors=True)


def start_store(endpoint: str, hold_fd: int) -> None:
    """Fork (twice: it is no child of this agent) the process that serves the rendezvous store on the
    endpoint's port until the pipe `hold_fd` reaches its end."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    with warnings.catch_warnings():  # Python 3.12 warns of fork in a process with threads (OpenBLAS's idle pool)
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child:
        os.waitpid(child, 0)
        os.close(hold_fd)
        return
    try:
        if os.fork() == 0:
            os.closerange(3, hold_fd)  # nothing of the agent's: its sockets, and a pipe end it holds itself
            os.closerange(hold_fd + 1, os.sysconf("SC_OPEN_MAX"))
            _serve_store(TCPStore, endpoint, hold_fd)
    finally:
        os._exit(0)  # never back into the agent's code (its finally blocks, atexit)


def _serve_store(store_type: Any, endpoint: str, hold_fd: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_NAME, STORE_PROCESS_NAME.encode(), 0, 0, 0)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # a stop of the job: agents still need it
        signal.signal(signum, signal.SIG_IGN)
    host, _, port = endpoint.rpartition(":")
    try:
        store = store_type(host or "127.0.0.1", int(port), is_master=True, wait_for_workers=False)
    except (RuntimeError, ValueError) as exc:  # e.g. --port in use: the agents then time out naming the endpoint
        print(f"kubetrain.runtime.launch: cannot serve the rendezvous store on {endpoint}: {exc}", file=sys.stderr,
              flush=True)
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the agent's output pipes close when the agent exits, not when the store does
        os.dup2(devnull, fd)
    with contextlib.suppress(OSError):
        while os.read(hold_fd, 64):
            pass
    del store


def main(argv: list[str] | None = None) -> int:
    with own_tempdir():
        return _launch(sys.argv[1:] if argv is None else argv)


def _launch(argv: list[str]) -> int:
    # torch only when torchrun runs (launcher import budget)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, parse_args
    from torch.distributed.run import main as torchrun

    argv, env, dropped = for_this_torchrun(argv, _options(get_args_parser()))
    os.environ.update(env)
    if dropped:
        print(f"kubetrain.runtime.launch: this torchrun has no {', '.join(dropped)}: left out", file=sys.stderr,
              flush=True)
    hold = os.environ.pop(STORE_HOLD_FD_ENV, "")  # neither is for the workers
    if os.environ.pop(STORE_HOST_ENV, "") == "1":
        # Started by hand (the lines of `kubetrain run --dry-run`): the store lives as long as this agent.
        fd = int(hold) if hold else os.pipe()[0]
        start_store(parse_args(argv).rdzv_endpoint, fd)  # type: ignore[no-untyped-call]
    try:
        torchrun(argv)
    except SignalException as exc:
        print(f"kubetrain.runtime.launch: stopped by {exc.sigval.name}; exit code {128 + int(exc.sigval)}",
              file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        code = failure_exit_code(exc)
        log_dir = parse_args(argv).log_dir  # type: ignore[no-untyped-call]
        for line in failure_lines(exc, log_dir):
            print(line, file=sys.stderr, flush=True)
        print(f"kubetrain.runtime.launch: a worker failed; exit code {code}", file=sys.stderr, flush=True)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
