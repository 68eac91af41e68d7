"""Credentials from kubeconfig plugins: exec (gke-gcloud-auth-plugin, aws eks get-token, kubelogin...), run by
kubetrain itself (kubetrain.kube.execplugin), and the legacy auth-providers (gcp, oidc), which only the
kubernetes package implements: it is imported (~1 s) for those users alone.

The kubernetes package's loader logs a failed plugin and carries on without credentials, so the server
answers "system:anonymous cannot get ..." — an RBAC-looking error for what is a login problem. Here a
failure is an `AuthPluginError` naming the plugin and its own first line of error.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import replace

from kubetrain.kube.errors import AuthPluginError
from kubetrain.kube.execplugin import Credential, ExecPlugin
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Auth

REFRESH_MARGIN = dt.timedelta(seconds=30)


def plugin_credentials(endpoint: Endpoint) -> tuple[Endpoint, Auth]:
    """(the endpoint, with a client certificate if the plugin returned one; the Authorization source)."""
    if endpoint.exec_config:
        return _exec(endpoint)
    return endpoint, _auth_provider(endpoint)


def _exec(endpoint: Endpoint) -> tuple[Endpoint, Auth]:
    runner = _ExecRunner(endpoint)
    credential = runner.refresh()
    if credential.cert_data:
        return replace(endpoint, cert_data=credential.cert_data, key_data=credential.key_data, cert_file=None,
                       key_file=None), lambda: None
    return endpoint, runner.header


class _ExecRunner:
    """Runs the plugin, caches its token until shortly before `expirationTimestamp`, and re-runs it."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.plugin = ExecPlugin(endpoint)
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires: dt.datetime | None = None

    def header(self) -> str | None:
        with self._lock:
            if self._token is None or (self._expires and dt.datetime.now(dt.UTC) > self._expires - REFRESH_MARGIN):
                self.refresh()
            return f"Bearer {self._token}" if self._token else None

    def refresh(self) -> Credential:
        credential = self.plugin.run()
        self._token, self._expires = credential.token, credential.expires
        return credential


def _first_line(message: str) -> str:
    """The first line of an auth-provider library's error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0] if lines else message


def _auth_provider(endpoint: Endpoint) -> Auth:
    """gcp / oidc auth-providers: the kubernetes loader fills a Configuration; use its Authorization."""
    # the kubernetes package (~1 s) only for legacy auth-providers (.importlinter)
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
