"""Credentials from kubeconfig plugins (exec: gke-gcloud-auth-plugin, aws eks get-token, kubelogin...;
auth-provider: gcp, oidc), run by the kubernetes package's own implementations.

The kubernetes package's loader logs a failed exec plugin and carries on without credentials, so the
server answers "system:anonymous cannot get ..." — an RBAC-looking error for what is a login problem.
Here the plugin is run directly (`ExecProvider`, the same code) and a failure is an `AuthPluginError`
naming the plugin and its own first line of stderr. Importing kubernetes costs ~1 s, paid only by
users with a plugin.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import replace
from typing import Any

from kubetrain.client.errors import AuthPluginError
from kubetrain.client.kubeconfig import Endpoint
from kubetrain.client.rest import Auth

REFRESH_MARGIN = dt.timedelta(seconds=30)


def plugin_credentials(endpoint: Endpoint) -> tuple[Endpoint, Auth]:
    """(the endpoint, with a client certificate if the plugin returned one; the Authorization source)."""
    if endpoint.exec_config:
        return _exec(endpoint)
    return endpoint, _auth_provider(endpoint)


def _exec(endpoint: Endpoint) -> tuple[Endpoint, Auth]:
    runner = _ExecRunner(endpoint)
    status = runner.status()
    if status.get("clientCertificateData"):
        cert = str(status["clientCertificateData"]).encode()
        key = str(status.get("clientKeyData") or "").encode()
        return replace(endpoint, cert_data=cert, key_data=key, cert_file=None, key_file=None), lambda: None
    return endpoint, runner.header


class _ExecRunner:
    """Runs the plugin, caches its token until shortly before `expirationTimestamp`, and re-runs it."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.config = endpoint.exec_config or {}
        self.command = str(self.config.get("command") or "?")
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires: dt.datetime | None = None

    def header(self) -> str | None:
        with self._lock:
            if self._token is None or (self._expires and dt.datetime.now(dt.UTC) > self._expires - REFRESH_MARGIN):
                self.status()
            return f"Bearer {self._token}" if self._token else None

    def status(self) -> dict[str, Any]:
        from kubernetes.config.config_exception import ConfigException
        from kubernetes.config.exec_provider import ExecProvider
        from kubernetes.config.kube_config import ConfigNode

        node = ConfigNode("exec", self.config)
        try:
            status = ExecProvider(node, self.endpoint.base_dir).run()
        except FileNotFoundError:
            hint = str(self.config.get("installHint") or "").strip().splitlines()
            raise AuthPluginError(f"kubeconfig user {self.endpoint.user}: auth plugin {self.command} is not "
                                  f"installed (not on PATH){': ' + hint[0] if hint else ''}") from None
        except (ConfigException, OSError) as exc:
            raise AuthPluginError(f"kubeconfig user {self.endpoint.user}: auth plugin {self.command} failed: "
                                  f"{_first_line(str(exc))} (log in again with the cloud's CLI, e.g. "
                                  "`gcloud auth login`, `aws sso login`, `az login`)") from None
        if not isinstance(status, dict):
            raise AuthPluginError(f"auth plugin {self.command}: its ExecCredential has no status")
        self._token = status.get("token")
        expiry = status.get("expirationTimestamp")
        self._expires = _parse_time(expiry) if expiry else None
        return status


def _first_line(message: str) -> str:
    """ExecProvider's 'exec: process returned 1. <stderr>': the exit code and the plugin's first line."""
    head, _, stderr = message.partition(". ")
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"{head.removeprefix('exec: ')}: {lines[0]}" if lines else head.removeprefix("exec: ")


def _parse_time(value: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _auth_provider(endpoint: Endpoint) -> Auth:
    """gcp / oidc auth-providers: the kubernetes loader fills a Configuration; use its Authorization."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=endpoint.kubeconfig, context=endpoint.context,
                                client_configuration=configuration)
    except Exception as exc:  # the providers raise whatever their libraries raise (google.auth, oauthlib)
        name = (endpoint.auth_provider or {}).get("name", "?")
        raise AuthPluginError(f"kubeconfig user {endpoint.user}: auth-provider {name} failed: "
                              f"{_first_line(str(exc))}") from None
    value = configuration.api_key.get("authorization")
    if not value:
        name = (endpoint.auth_provider or {}).get("name", "?")
        raise AuthPluginError(f"kubeconfig user {endpoint.user}: auth-provider {name} gave no token "
                              "(log in again)")
    return lambda: str(value)
