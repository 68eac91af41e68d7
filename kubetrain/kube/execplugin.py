"""Run a kubeconfig exec credential plugin (client.authentication.k8s.io v1 / v1beta1) the way client-go does,
without the kubernetes package.

EKS (`aws eks get-token`), GKE (`gke-gcloud-auth-plugin`) and AKS (`kubelogin`) users all authenticate this way;
running the plugin here keeps their `status`/`list`/`logs` free of the kubernetes package's ~1 s import.
What client-go does and this does too: `env` added to ours, `args`, `installHint` when the command is missing,
`interactiveMode` (Never / IfAvailable / Always; stdin is handed over only when interactive), the ExecCredential
request in KUBERNETES_EXEC_INFO (with the cluster when `provideClusterInfo`), the token cached until its
`expirationTimestamp`, and a client certificate/key returned instead of a token. A relative command with a
`/` in it is relative to the kubeconfig file that names it.

Unlike the kubernetes package's loader (which logs a failed plugin and carries on anonymously, so the server
answers "system:anonymous cannot get ..."), a failure is an `AuthPluginError` naming the plugin and its own
first line of stderr.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.kube.errors import AuthPluginError
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.objects import parse_time

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
LOGIN_HINT = "log in again with the cloud's CLI, e.g. `gcloud auth login`, `aws sso login`, `az login`"


@dataclass(frozen=True)
class Credential:
    """What the plugin returned: a bearer token, or a client certificate and key (PEM), and until when."""

    token: str | None
    cert_data: bytes | None
    key_data: bytes | None
    expires: dt.datetime | None


class ExecPlugin:
    """One kubeconfig user's `exec` section."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.config: dict[str, Any] = dict(endpoint.exec_config or {})
        self.command = str(self.config.get("command") or "")
        self.api_version = str(self.config.get("apiVersion") or "")

    def _fail(self, what: str) -> AuthPluginError:
        return AuthPluginError(f"kubeconfig user {self.endpoint.user}: auth plugin {self.command or '?'} {what}")

    def run(self) -> Credential:
        """Run the plugin once and parse its ExecCredential."""
        if not self.command:
            raise self._fail("has no command (users[].user.exec.command)")
        if self.api_version not in API_VERSIONS:
            raise self._fail(f"asks for apiVersion {self.api_version or '(none)'!r}; kubetrain speaks "
                             f"{' and '.join(API_VERSIONS)}")
        interactive = self._interactive()
        try:
            done = subprocess.run(
                [self._executable(), *[str(a) for a in self.config.get("args") or []]],
                env=self._environment(interactive), cwd=self.endpoint.base_dir or None,
                stdin=None if interactive else subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=None if interactive else subprocess.PIPE, check=False)
        except FileNotFoundError:
            hint = str(self.config.get("installHint") or "").strip().splitlines()
            raise self._fail(f"is not installed (not on PATH){': ' + hint[0] if hint else ''}") from None
        except OSError as exc:
            raise self._fail(f"could not be started: {exc.strerror}") from None
        if done.returncode != 0:
            lines = [line.strip() for line in (done.stderr or b"").decode("utf-8", "replace").splitlines()
                     if line.strip()]
            first = f": {lines[0]}" if lines else ""
            raise self._fail(f"failed: process returned {done.returncode}{first} ({LOGIN_HINT})")
        return self._parse(done.stdout)

    def _interactive(self) -> bool:
        # client-go requires interactiveMode in v1; kubetrain, like the kubernetes package before it, takes
        # IfAvailable (v1beta1's default) when a v1 kubeconfig leaves it out.
        mode = str(self.config.get("interactiveMode") or "IfAvailable")
        if mode not in ("Never", "IfAvailable", "Always"):
            raise self._fail(f"has interactiveMode {mode!r}; expected Never, IfAvailable or Always")
        terminal = sys.stdin is not None and sys.stdin.isatty()
        if mode == "Always" and not terminal:
            raise self._fail("needs an interactive terminal (interactiveMode: Always) and stdin is not one")
        return mode != "Never" and terminal

    def _executable(self) -> str:
        command = Path(self.command).expanduser()
        if not command.is_absolute() and os.sep in self.command and self.endpoint.base_dir:
            return str(Path(self.endpoint.base_dir) / command)
        return str(command) if os.sep in self.command else self.command

    def _environment(self, interactive: bool) -> dict[str, str]:
        env = dict(os.environ)
        for entry in self.config.get("env") or []:
            if isinstance(entry, dict) and entry.get("name"):
                env[str(entry["name"])] = str(entry.get("value") or "")
        spec: dict[str, Any] = {"interactive": interactive}
        if self.config.get("provideClusterInfo"):
            spec["cluster"] = self._cluster()
        env["KUBERNETES_EXEC_INFO"] = json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential",
                                                  "spec": spec})
        return env

    def _cluster(self) -> dict[str, Any]:
        endpoint = self.endpoint
        ca = endpoint.ca_data
        if ca is None and endpoint.ca_file:
            try:
                ca = Path(endpoint.ca_file).read_bytes()
            except OSError:
                ca = None
        cluster: dict[str, Any] = {"server": endpoint.server}
        if endpoint.tls_server_name:
            cluster["tls-server-name"] = endpoint.tls_server_name
        if endpoint.insecure:
            cluster["insecure-skip-tls-verify"] = True
        if ca:
            cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        return cluster

    def _parse(self, stdout: bytes) -> Credential:
        try:
            data = json.loads(stdout)
        except ValueError as exc:
            raise self._fail(f"printed no ExecCredential JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("kind") != "ExecCredential":
            raise self._fail("printed something other than an ExecCredential")
        if data.get("apiVersion") != self.api_version:
            raise self._fail(f"answered in apiVersion {data.get('apiVersion')!r}, not the "
                             f"{self.api_version!r} the kubeconfig asks for")
        status = data.get("status")
        if not isinstance(status, dict):
            raise self._fail("printed an ExecCredential without a status")
        token = str(status.get("token") or "") or None
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if bool(cert) != bool(key):
            raise self._fail("returned only one of clientCertificateData and clientKeyData")
        if not token and not cert:
            raise self._fail(f"returned neither a token nor a client certificate ({LOGIN_HINT})")
        expires = parse_expiry(status.get("expirationTimestamp"))
        return Credential(token, str(cert).encode() if cert else None, str(key).encode() if key else None, expires)


def parse_expiry(value: object) -> dt.datetime | None:
    """An RFC 3339 expirationTimestamp (None when absent or unreadable: then the credential does not expire)."""
    return parse_time(value)
