"""The kubernetes package's ApiClient with kubetrain's retries (kubetrain.kube.retry) and timeouts.

Only `Connection.api` builds one (lazily), for what only the kubernetes package does: exec into a pod over
WebSocket (`kubetrain gpu`). Every other call goes through the REST client (kubetrain.kube.rest).
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3 import Retry
from urllib3.exceptions import InsecureRequestWarning, MaxRetryError, ProtocolError

from kubetrain.kube.errors import translate
from kubetrain.kube.rest import CONNECT_TIMEOUT, REQUEST_TIMEOUT, Rest
from kubetrain.kube.retry import DEFAULT_POLICY, RetryPolicy, delay_for


class RetryingApiClient(client.ApiClient):
    """An ApiClient whose every request is retried by `policy` (see the module docstring)."""

    retry_policy: RetryPolicy = DEFAULT_POLICY
    _kubetrain_rest: Rest | None = None  # the Connection's REST client, which rest_of(api) hands out
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def __init__(self, configuration: client.Configuration | None = None, *args: Any,
                 request_timeout: float | None = None, **kwargs: Any) -> None:
        configuration = configuration or client.Configuration()
        self.request_timeout = request_timeout or REQUEST_TIMEOUT
        if configuration.retries is None:
            # urllib3 keeps its quick reconnects, but statuses (and Retry-After) are ours to handle, once.
            configuration.retries = Retry(total=3, status=0, respect_retry_after_header=False,
                                          raise_on_status=False)
        if not configuration.verify_ssl:
            # insecure-skip-tls-verify is the kubeconfig's own choice, silent in kubectl and in the REST client;
            # urllib3 would print an InsecureRequestWarning on every request.
            urllib3.disable_warnings(InsecureRequestWarning)
        super().__init__(configuration, *args, **kwargs)

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        """Retried request; a network failure that retrying did not cure is a ClusterError naming the server."""
        # The generated client has no default timeout: a hung server would hang us forever.
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = (CONNECT_TIMEOUT, self.request_timeout)
        attempt = 1
        while True:
            try:
                response = super().call_api(*args, **kwargs)
            except (ProtocolError, MaxRetryError, OSError, http.client.HTTPException) as exc:
                delay = delay_for(attempt, self.retry_policy, exc=exc)
                if delay is None:
                    raise translate(exc, "reach the API server", self.configuration.host) from None
            except ApiException as exc:  # status 0: TLS failure, reported by the REST layer as an ApiException
                if exc.status:
                    raise
                raise translate(exc, "reach the API server", self.configuration.host) from None
            else:
                if response.status < 429:
                    return response
                body = response.read()  # drain, so the connection goes back to the pool (the body is cached)
                delay = delay_for(attempt, self.retry_policy, status=response.status, body=body,
                                  headers=response.getheaders())
                if delay is None:
                    return response
            self.sleep(delay)
            attempt += 1
