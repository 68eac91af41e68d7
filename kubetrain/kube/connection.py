"""Connect like kubectl: KUBECONFIG / ~/.kube/config with --context, else in-cluster config.

A Connection holds the one REST client:

* `rest` (kubetrain.kube.rest): http.client, no kubernetes or urllib3 import, for every API call of the CLI,
  the Python API and the controller. A fresh `kubetrain status` is mostly Python start-up this way.
* `api`: the kubernetes package's ApiClient, built on first use (its import costs 0.6–1.5 s) only for exec
  into pods over WebSocket (`kubetrain gpu`); `rest_of(api)` is this connection's `rest`, not a second pool.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubetrain.errors import KubeconfigError
from kubetrain.kube import kubeconfig as kubeconfigs
from kubetrain.kube.errors import cluster_errors
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import USER_AGENT, Rest

if TYPE_CHECKING:
    from kubernetes import client

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class Connection:
    """The clients plus the namespace the kubeconfig context names (None when it names none)."""

    def __init__(self, rest: Rest, context: str | None, context_namespace: str | None,
                 kubeconfig_path: str | None = None) -> None:
        self.rest, self.context, self.context_namespace = rest, context, context_namespace
        self._kubeconfig = kubeconfig_path
        self._api: client.ApiClient | None = None
        self._lock = threading.Lock()

    def namespace(self, *preferred: str | None) -> str:
        """The first namespace given (flag, spec), then the context's, then `default`."""
        return next((ns for ns in preferred if ns), self.context_namespace or "default")

    @property
    def server(self) -> str:
        """The API server URL (for messages such as "cannot reach https://...")."""
        return self.rest.server

    @property
    def api(self) -> client.ApiClient:
        """The kubernetes package's client (retrying, with timeouts), built on first use."""
        with self._lock:
            if self._api is None:
                self._api = _kubernetes_client(self)
            return self._api


def connect(context: str | None = None, kubeconfig: str | None = None,
            request_timeout: float | None = None) -> Connection:
    """Load credentials the way kubectl does; a missing or broken config is a one-line KubeconfigError (exit 2)."""
    endpoint = kubeconfigs.load(kubeconfig, context)
    if endpoint is None:
        if context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            endpoint = _in_cluster()
        else:
            where = kubeconfig or os.environ.get("KUBECONFIG") or str(kubeconfigs.DEFAULT)
            raise KubeconfigError(f"no usable kubeconfig ({where} does not exist); set KUBECONFIG or pass "
                                  "--kubeconfig / --context")
    auth = None
    if endpoint.needs_plugin:
        from kubetrain.kube.auth import plugin_credentials

        endpoint, auth = plugin_credentials(endpoint)
    rest = Rest(endpoint, auth, request_timeout)
    return Connection(rest, endpoint.context, endpoint.namespace, endpoint.kubeconfig)


def _in_cluster() -> Endpoint:
    """The pod's service account: its token file (re-read, it rotates) and CA."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    namespace_file = SERVICE_ACCOUNT / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.exists() else None
    return Endpoint(server=f"https://{host}:{port}", context=None, namespace=namespace,
                    ca_file=str(SERVICE_ACCOUNT / "ca.crt"), token_file=str(SERVICE_ACCOUNT / "token"))


def _kubernetes_client(connection: Connection) -> client.ApiClient:
    """The same server and credentials as `connection.rest`, for the kubernetes package's typed API."""
    import logging

    from kubernetes import client

    from kubetrain.kube.k8sapi import RetryingApiClient

    endpoint = connection.rest.endpoint
    configuration = client.Configuration()
    configuration.host = endpoint.server
    configuration.verify_ssl = not endpoint.insecure
    configuration.tls_server_name = endpoint.tls_server_name
    configuration.ssl_ca_cert = _file_for(endpoint.ca_data, endpoint.ca_file)
    configuration.cert_file = _file_for(endpoint.cert_data, endpoint.cert_file)
    configuration.key_file = _file_for(endpoint.key_data, endpoint.key_file)
    rest = connection.rest

    def refresh(conf: Any) -> None:  # tokens rotate (exec plugins, tokenFile): ask the REST client's source
        with cluster_errors("authenticate"):
            value = rest.authorization()
        conf.api_key = {"authorization": value} if value else {}

    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]
    refresh(configuration)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its "Retrying (...)" warnings are not for users
    api = RetryingApiClient(configuration, request_timeout=rest.request_timeout)
    api.user_agent = USER_AGENT
    api._kubetrain_rest = rest  # rest_of(api): this connection's pool, not a second one over the same server
    return api


_FILES: list[str] = []


def _file_for(data: bytes | None, path: str | None) -> str | None:
    """The kubernetes client wants TLS material as files: inline data goes to a private temp file that
    lives as long as the process (the client may reconnect at any time)."""
    if not data:
        return path
    import atexit
    import tempfile

    fd, name = tempfile.mkstemp(prefix="kubetrain-", suffix=".pem")  # mode 0600
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    if not _FILES:
        atexit.register(_remove_files)
    _FILES.append(name)
    return name


def _remove_files() -> None:
    for name in _FILES:
        Path(name).unlink(missing_ok=True)
