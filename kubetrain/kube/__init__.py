"""The wire: one REST client (transport, kubeconfig, credentials, retries, typed errors, watches) and the vocabulary of
Kubernetes objects."""
