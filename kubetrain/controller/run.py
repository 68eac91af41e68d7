"""Run the controller process: probes, leader election, then the reconcile loop and progress reads."""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from kubetrain.controller import health
from kubetrain.controller.leader import LeaseElector
from kubetrain.controller.loop import Controller, Settings
from kubetrain.kube.rest import Rest

log = logging.getLogger("kubetrain.controller")


@dataclass(frozen=True)
class Election:
    namespace: str
    name: str = "kubetrain-controller"
    identity: str = ""
    duration: float = 15.0
    enabled: bool = True


def identity() -> str:
    """Pod name (HOSTNAME) plus a random suffix, as client-go does: a restarted pod is a new candidate."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def run(rest: Rest, settings: Settings, election: Election, probe_port: int,
        probe_address: str = "127.0.0.1") -> int:
    """Until SIGTERM/SIGINT (exit 0) or a lost Lease (exit 1, so the Deployment restarts us)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop, lost = threading.Event(), threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    state: dict[str, Controller] = {}
    started = time.monotonic()
    server = health.serve(probe_port, ready=lambda: True, metrics=lambda: _metrics(state, started),
                          address=probe_address)
    log.info("controller: probes and /metrics on %s:%d", probe_address, server.server_port)
    elector = LeaseElector(rest, election.namespace, election.name, election.identity or identity(),
                           duration=election.duration, renew_deadline=election.duration * 2 / 3)
    if election.enabled:
        if not elector.acquire(stop):
            return 0
        def on_lost() -> None:
            lost.set()
            stop.set()

        threading.Thread(target=elector.hold, args=(stop, on_lost), name="lease", daemon=True).start()
    controller = Controller(rest, settings, stop)
    state["controller"] = controller
    controller.start()
    interval = settings.progress_interval
    while not stop.wait(interval if interval > 0 else 3600):
        if interval > 0:
            controller.poll_progress()
    controller.shutdown()
    if election.enabled and not lost.is_set():
        elector.release()
    server.shutdown()
    return 1 if lost.is_set() else 0


def _metrics(state: dict[str, Controller], started: float) -> dict[str, float]:
    out = {"uptime_seconds": round(time.monotonic() - started, 1), "leader": float("controller" in state),
           "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    controller = state.get("controller")
    if controller is not None:
        out.update(reconciles_total=controller.reconciles, reconcile_failures_total=controller.failures,
                   api_requests_total=controller.counter.total(), queue_depth=len(controller.queue),
                   trainingjobs=len(controller.jobs.items()), progress_rounds_total=controller.progress_rounds,
                   progress_seconds_total=round(controller.progress_seconds, 3),
                   events_sent_total=controller.events.sent, events_dropped_total=controller.events.dropped,
                   events_pending=controller.events.pending(),
                   render_cache_hits_total=controller.desired.hits,
                   render_cache_misses_total=controller.desired.misses,
                   hang_rounds_total=controller.hangs.rounds, hang_execs_total=controller.hangs.execs,
                   hang_seconds_total=round(controller.hangs.seconds, 3))
        out.update(controller.errors.metrics())
        for verb, count in sorted(controller.counter.counts.items()):
            out[f'api_requests{{verb="{verb}"}}'] = count
            out[f'api_request_seconds{{verb="{verb}"}}'] = round(controller.counter.seconds[verb], 3)
    return out
