"""Connect like kubectl: KUBECONFIG / ~/.kube/config with --context, else in-cluster config."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from kubetrain import __version__
from kubetrain.client.retry import RetryingApiClient
from kubetrain.errors import ClusterError

USER_AGENT = f"kubetrain/{__version__}"


@dataclass(frozen=True)
class Connection:
    """An API client plus the namespace the kubeconfig context names (None when it names none)."""

    api: client.ApiClient
    context: str | None
    context_namespace: str | None

    def namespace(self, *preferred: str | None) -> str:
        """The first namespace given (flag, spec), then the context's, then `default`."""
        return next((ns for ns in preferred if ns), self.context_namespace or "default")

    @property
    def server(self) -> str:
        """The API server URL (for messages such as "cannot reach https://...")."""
        return str(self.api.configuration.host)


def connect(context: str | None = None, kubeconfig: str | None = None) -> Connection:
    """Load credentials the way kubectl does; a missing or broken config is a one-line ClusterError."""
    configuration = client.Configuration()
    # The client reads KUBECONFIG once, at import; read it per call, as kubectl does.
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = _pick_context(contexts, active, context)
        config.load_kube_config(config_file=kubeconfig, context=chosen["name"],
                                client_configuration=configuration)
        namespace = chosen.get("context", {}).get("namespace")
        return Connection(_api_client(configuration), chosen["name"], namespace)
    except (ConfigException, FileNotFoundError) as exc:
        if context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return _in_cluster(configuration)
        raise ClusterError(f"no usable kubeconfig ({exc}); set KUBECONFIG or pass --context") from None


def _pick_context(contexts: list[dict[str, Any]], active: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    if wanted is None:
        return active
    for candidate in contexts:
        if candidate["name"] == wanted:
            return candidate
    names = ", ".join(c["name"] for c in contexts) or "none"
    raise ClusterError(f"--context {wanted}: no such context in the kubeconfig (have: {names})")


def _in_cluster(configuration: client.Configuration) -> Connection:
    config.load_incluster_config(client_configuration=configuration)
    namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    namespace = Path(namespace_file).read_text().strip() if os.path.exists(namespace_file) else None
    return Connection(_api_client(configuration), None, namespace)


def _api_client(configuration: client.Configuration) -> client.ApiClient:
    """Every request retried with backoff (kubetrain.client.retry), identified as kubetrain."""
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its "Retrying (...)" warnings are not for users
    api = RetryingApiClient(configuration)
    api.user_agent = USER_AGENT
    return api
