"""A real S3-compatible server for the suite: moto's standalone server, in its own process.

Why moto: it is the server s3fs's own test suite runs against, it speaks the S3 REST API over
HTTP (signatures, multipart uploads, listing, conditional requests), and it installs from PyPI
(``moto[server]`` in the dev extra) in seconds, where MinIO or SeaweedFS would add a large Go
build to every cold CI run. Clients reach it exactly as they reach AWS: through an endpoint URL
and credentials, with no mocking inside the process under test.

Use the ``s3_server`` fixture (tests/testenv/plugin.py):

    def test_x(s3_server):
        url = s3_server.bucket("ckpt")            # -> "s3://ckpt-<random>"
        env = s3_server.env()                     # AWS_* variables for a child process
        fs = s3_server.filesystem()               # an s3fs.S3FileSystem for assertions
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from .polling import TimedOut, wait_for
from .processes import free_port

ACCESS_KEY = "kubetrain-test"
SECRET_KEY = "kubetrain-test-secret"
REGION = "us-east-1"


class S3Unavailable(RuntimeError):
    """The S3 server could not be started (moto missing, or it did not answer)."""


class S3Server:
    """``python -m moto.server`` on a free port; stop() ends it and its children."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_port(host)
        self.endpoint_url = f"http://{host}:{self.port}"
        self._log = workdir / "s3-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> S3Server:
        try:
            import moto.server  # noqa: F401
        except ImportError as exc:
            raise S3Unavailable(f"moto[server] is not installed ({exc}); run `make install`") from exc
        with self._log.open("wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        def server_alive() -> None:
            if self._proc is not None and self._proc.poll() is not None:
                raise S3Unavailable(f"moto server exited with {self._proc.returncode}; see {self._log}")

        def answers() -> bool:
            with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=2):
                return True

        try:
            wait_for(answers, f"the moto server on {self.endpoint_url}", timeout,
                     tolerate=(urllib.error.URLError, OSError), guard=server_alive)
        except TimedOut:
            self.stop()
            raise S3Unavailable(f"moto server did not answer on {self.endpoint_url} within {timeout:.0f}s") from None

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def env(self) -> dict[str, str]:
        """What a child process (kubetrain run, torchrun, a pod) needs to reach this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    def filesystem(self) -> Any:
        """A fresh s3fs filesystem on this server (no instance cache shared with other tests)."""
        import s3fs

        return s3fs.S3FileSystem(
            key=ACCESS_KEY, secret=SECRET_KEY, client_kwargs={"endpoint_url": self.endpoint_url},
            skip_instance_cache=True,
        )

    def bucket(self, prefix: str = "bucket") -> str:
        """Create a new, empty bucket; returns its ``s3://`` URL."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.filesystem().mkdir(name)
        return f"s3://{name}"

