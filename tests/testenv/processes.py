"""Child-process supervision for the test control plane.

Every component runs in its own session/process group, so one killpg() takes
down whatever it forked (kwok's exec'd commands, the operator's mount wrapper).
Three layers make sure nothing outlives its owner:

* ``Supervisor.stop()``: SIGTERM each group in reverse start order, SIGKILL on timeout.
* ``atexit`` and a SIGTERM/SIGHUP handler that turns the signal into
  KeyboardInterrupt, so pytest still runs fixture teardown.
* ``PR_SET_PDEATHSIG=SIGKILL`` set in each child before exec: if the owner is
  SIGKILLed (no Python code runs), the kernel kills the children.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .polling import TimedOut, wait_for

PR_SET_PDEATHSIG = 1
# The components are Go programs (etcd, the API server, the controllers, kwok, the kubelet, containerd). With
# GOGC 400 their collector runs a quarter as often: a control-plane module set took 17 % less CPU in two
# interleaved pairs (docs/testenv.md, "The budget"); heaps stay far below this machine's memory. A GOGC in the
# environment wins.
GO_RUNTIME = {"GOGC": "400"}
_LIVE: weakref.WeakSet[Supervisor] = weakref.WeakSet()


# Above the defaults of Kubernetes' own components (10248-10259: kubelet, kube-proxy, ...), below torch's
# (23456: the operator's master port, 29400/29500: torchrun's and `kubetrain run`'s).
PORTS = (12000, 22999)
_HANDED: set[int] = set()
# Not the module `random`: in-process training seeds it (kubetrain.runtime seeds Python's generator), and two
# pytest workers seeded alike then picked the same ports at the same moment ("bind: address already in use").
_PICK = random.SystemRandom()


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range for the source ports of outgoing connections (and for bind to port 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def port_range(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """PORTS below the kernel's ephemeral range; under pytest-xdist, this worker's share of it. Each worker
    remembers only the ports it handed out, so two workers picking from one range could hand out the same
    port to two components (the Trainer's "bind: address already in use" in a two-worker run)."""
    lowest, highest = PORTS[0], min(PORTS[1], ephemeral_ports()[0] - 1)
    worker, count = environ.get("PYTEST_XDIST_WORKER", ""), environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        size = (highest - lowest + 1) // int(count)
        lowest += int(worker[2:]) % int(count) * size
        highest = lowest + size - 1
    return lowest, highest


def free_port(host: str = "127.0.0.1") -> int:
    """A currently free TCP port on `host`, below the kernel's ephemeral range. A port that bind(0) hands
    out comes from that range, which is also where every outgoing connection on the machine takes its source
    port: one of them took ours between this pick and the component's own bind (the training-operator's
    "bind: address already in use" in a busy two-worker run). Never the same port twice in a process, nor
    one that another pytest-xdist worker may hand out (port_range)."""
    lowest, highest = port_range()
    for _ in range(1000):
        port = _PICK.randint(lowest, highest)
        if port in _HANDED:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _HANDED.add(port)
        return port
    raise RuntimeError(f"no free TCP port between {lowest} and {highest}")


def _die_with_parent() -> None:
    # Runs in the child between fork and exec. The parent-death signal is
    # kept across execve (not for setuid binaries, which we never run).
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass
class Child:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


@dataclass(eq=False)  # hashable by identity, for the WeakSet
class Supervisor:
    log_dir: Path
    children: list[Child] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _LIVE.add(self)
        _install_exit_hooks()

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
    ) -> Child:
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as out:
            out.write(f"$ {' '.join(map(str, argv))}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**GO_RUNTIME, **os.environ, **(env or {})},
                cwd=cwd,
                start_new_session=True,  # own process group: killpg reaches grandchildren
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads run Python here
            )
        child = Child(name, popen, log)
        self.children.append(child)
        return child

    def pids(self) -> list[int]:
        return [c.pid for c in self.children]

    def stop_child(self, child: Child, timeout: float = 10.0) -> None:
        if child in self.children:
            self.children.remove(child)
        _stop_group(child.popen, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every child, newest first; SIGKILL the group after `timeout`."""
        while self.children:
            child = self.children.pop()
            _stop_group(child.popen, timeout)
        _LIVE.discard(self)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _stop_group(popen: subprocess.Popen[bytes], timeout: float) -> None:
    _signal_group(popen.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=timeout)
    # Even after the leader exits, stragglers in its group get SIGKILL.
    _signal_group(popen.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=5)


def stop_all() -> None:
    for sup in list(_LIVE):
        sup.stop(timeout=5)


_hooks = {"installed": False}


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"received signal {signum}")


def _install_exit_hooks() -> None:
    if _hooks["installed"]:
        return
    _hooks["installed"] = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        # Only take over signals nobody else handles: as KeyboardInterrupt,
        # pytest unwinds and runs the fixture teardown.
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_interrupt)


class NotReady(RuntimeError):
    """A component did not become ready in time (or died)."""


def wait_until(
    check: Callable[[], bool],
    what: str,
    timeout: float,
    child: Child | None = None,
    interval: float = 0.2,
) -> None:
    """Poll `check` until it returns True; fail fast if `child` has exited."""

    def child_alive() -> None:
        if child is not None and not child.alive():
            code = child.popen.returncode
            raise NotReady(f"{child.name} exited with {code} while waiting for {what}:\n{child.log_tail()}")

    try:  # connection refused etc. while it starts means "not yet"
        wait_for(check, what, timeout, interval, tolerate=(Exception,), guard=child_alive)
    except TimedOut as exc:
        tail = f"\n{child.name} log:\n{child.log_tail()}" if child else ""
        raise NotReady(f"{exc}{tail}") from None
