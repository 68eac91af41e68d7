"""Real rank processes with kubetrain's heartbeat (no torch) for the stacks tests, and what they were sent.

`answering`: SIGUSR2 blocked in every thread, so a SIGUSR2 sent to it stays pending where the test sees it
(/proc/PID/status), while its writer thread answers stacks requests (no signal involved). `gil`: the main
thread holds the GIL in C (libc's sleep through ctypes.PyDLL, which keeps the GIL during the call) and never
hands it over (a switch interval of 1,000 s), so the writer thread cannot run: only SIGUSR2 gets its stack.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kubetrain import podenv

RANK = textwrap.dedent("""
    import ctypes, signal, sys, time
    from kubetrain.runtime.heartbeat import Heartbeat

    def waiting_in_all_reduce():
        print("ready", flush=True)
        while True:
            time.sleep(0.05)

    def holding_the_gil():
        libc = ctypes.PyDLL(None)
        sys.setswitchinterval(1e3)
        libc.write(1, b"ready\\n", 6)
        while True:
            libc.sleep(60)

    if sys.argv[2] == "answering":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})  # before the writer thread: it inherits the mask
    progress = Heartbeat.from_env(int(sys.argv[1]), 2)
    progress.start()
    progress.step(1)
    holding_the_gil() if sys.argv[2] == "gil" else waiting_in_all_reduce()
""")


@contextmanager
def rank_processes(directory: Path, modes: list[str], env: Mapping[str, str] | None = None
                   ) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One rank per mode (rank = its index), each started and ready; killed at the end."""
    full = {**os.environ, **(env or {}), podenv.PROGRESS_DIR_ENV: str(directory)}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(n), mode], stdout=subprocess.PIPE, env=full)
             for n, mode in enumerate(modes)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def pending_signals(pid: int) -> set[int]:
    """The signals sent to PID and not yet delivered (/proc/PID/status: to the process, to its main thread)."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    mask = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    return {n + 1 for n in range(64) if mask >> n & 1}
