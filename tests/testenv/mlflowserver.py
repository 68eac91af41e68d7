"""A real MLflow tracking server for the suite: the `mlflow` package's own server on loopback, SQLite backend,
artifacts served by the server itself (the dev extra installs `mlflow`).

Use the ``mlflow_server`` fixture (tests/testenv/plugin.py):

    def test_x(mlflow_server):
        uri = mlflow_server.uri                   # -> "http://127.0.0.1:PORT"
        client = mlflow_server.client()           # an MlflowClient for assertions
        mlflow_server.uri_at(real_node.gateway)   # the same server as the real node's pods reach it
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .polling import TimedOut, wait_for
from .processes import free_port


class MLflowUnavailable(RuntimeError):
    """The MLflow server could not be started (mlflow missing, or it did not answer)."""


class MLflowServer:
    """``mlflow server`` on a free port; stop() ends it and its workers."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1", bind: str | None = None) -> None:
        """`bind`: the address to listen on, when not only `host` (0.0.0.0: also the real node's bridge)."""
        self.host = host
        self.bind = bind or host
        self.port = free_port(self.bind)
        self.uri = f"http://{host}:{self.port}"
        self.workdir = workdir
        self._log = workdir / "mlflow-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> MLflowServer:
        # only whether it is there: importing mlflow.server here would cost this process seconds of CPU for
        # what the server's own process imports anyway (one that cannot start says so below)
        if importlib.util.find_spec("mlflow") is None:
            raise MLflowUnavailable("mlflow is not installed; run `make install`")
        command = [sys.executable, "-m", "mlflow", "server", "--host", self.bind, "--port", str(self.port),
                   "--workers", "1", "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
                   "--artifacts-destination", str(self.workdir / "artifacts")]
        with self._log.open("wb") as log:
            # no job runner: its three huey consumers serve features (GenAI jobs) the tests never use
            env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
            self._proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          cwd=self.workdir, env=env)

        def server_alive() -> None:
            if self._proc is not None and self._proc.poll() is not None:
                raise MLflowUnavailable(f"mlflow server exited with {self._proc.returncode}: {self.log()[-2000:]}")

        def answers() -> bool:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                return True

        try:
            wait_for(answers, f"the MLflow server on {self.uri}", timeout,
                     tolerate=(urllib.error.URLError, OSError), guard=server_alive)
        except TimedOut:
            self.stop()
            raise MLflowUnavailable(f"mlflow server did not answer on {self.uri} within {timeout:.0f}s: "
                                    f"{self.log()[-2000:]}") from None
        return self

    def uri_at(self, address: str) -> str:
        """The server's URI through another of this machine's addresses (one it listens on)."""
        return f"http://{address}:{self.port}"

    def log(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        os.killpg(self._proc.pid, signal.SIGTERM)  # the server's own process group: uvicorn and its workers
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(timeout=10)

    def client(self) -> Any:
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)
