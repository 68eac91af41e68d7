"""Connect like kubectl: KUBECONFIG / ~/.kube/config with --context, else in-cluster config.

A Connection holds the one client, `rest` (kubetrain.kube.rest): http.client, no kubernetes or urllib3
import, for every API call of the CLI, the Python API and the controller, and for exec into pods over
WebSocket (kubetrain.kube.podexec, on the same TLS context and credentials). A fresh `kubetrain status` is
mostly Python start-up this way.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from kubetrain.errors import KubeconfigError
from kubetrain.kube import kubeconfig as kubeconfigs
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class Connection:
    """The client plus the namespace the kubeconfig context names (None when it names none)."""

    def __init__(self, rest: Rest, context: str | None, context_namespace: str | None) -> None:
        self.rest, self.context, self.context_namespace = rest, context, context_namespace

    def namespace(self, *preferred: str | None) -> str:
        """The first namespace given (flag, spec), then the context's, then `default`."""
        return next((ns for ns in preferred if ns), self.context_namespace or "default")

    @property
    def cluster(self) -> str:
        """The cluster's name: the kubeconfig context's cluster, else the API server's host (in a pod)."""
        return self.rest.endpoint.cluster or urllib.parse.urlsplit(self.rest.server).hostname or self.rest.server

    @property
    def server(self) -> str:
        """The API server URL (for messages such as "cannot reach https://...")."""
        return self.rest.server


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
        # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)
        from kubetrain.kube.auth import plugin_credentials

        endpoint, auth = plugin_credentials(endpoint)
    rest = Rest(endpoint, auth, request_timeout)
    return Connection(rest, endpoint.context, endpoint.namespace)


def _in_cluster() -> Endpoint:
    """The pod's service account: its token file (re-read, it rotates) and CA."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    namespace_file = SERVICE_ACCOUNT / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.exists() else None
    return Endpoint(server=f"https://{host}:{port}", context=None, namespace=namespace,
                    ca_file=str(SERVICE_ACCOUNT / "ca.crt"), token_file=str(SERVICE_ACCOUNT / "token"))
