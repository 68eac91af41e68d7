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
"""

from __future__ import annotations

import glob
import os
import sys
from typing import Any

from kubetrain.local.plan import FAILED_RANK


def worker_exit_code(exitcode: int) -> int:
    """A worker's status as a shell would report it: a death by signal N (negative) is 128 + N."""
    return 128 - exitcode if exitcode < 0 else exitcode


def failure_exit_code(error: Any) -> int:
    """The exit code for torchrun's ChildFailedError: its first (root-cause) failure's code, never 0."""
    _rank, failure = error.get_first_failure()
    return worker_exit_code(int(failure.exitcode)) or 1


def failure_lines(error: Any, log_dir: str | None) -> list[str]:
    """One line per failed rank of torchrun's ChildFailedError, with the rank's stderr file when --log-dir
    keeps one (torchrun writes LOG_DIR/<run id>_<suffix>/attempt_<n>/<local rank>/stderr.log)."""
    lines = []
    for rank, failure in sorted(error.failures.items()):
        logs = glob.glob(os.path.join(glob.escape(log_dir), "*", "attempt_*", str(failure.local_rank),
                                      "stderr.log")) if log_dir else []
        where = f"; log: {max(logs, key=os.path.getmtime)}" if logs else ""
        lines.append(f"{FAILED_RANK}{rank} exited with {worker_exit_code(int(failure.exitcode))}{where}")
    return lines


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun
    from torch.distributed.run import parse_args

    argv = sys.argv[1:] if argv is None else argv
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
