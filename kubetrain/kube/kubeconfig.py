"""Read a kubeconfig the way kubectl does, without importing the kubernetes package.

Importing `kubernetes` (any submodule: its package __init__ loads every generated model) costs 0.6–1.5 s,
more than a whole `kubetrain status` may take. The common credentials — client certificates, bearer
tokens (inline or tokenFile), basic auth — need nothing but YAML and the merge rules below, so they are
read here. Users with an `exec` plugin or an `auth-provider` (gcloud, aws, kubelogin, OIDC...) are
`needs_plugin`: kubetrain.kube.auth runs them with the kubernetes package's own implementation.

Merge rules (kubectl's): KUBECONFIG is a `:`-separated list; for clusters, users and contexts the first
file that defines a name wins; `current-context` comes from the first file that sets one. Relative file
paths are relative to the file that names them.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.errors import KubeconfigError

DEFAULT = Path("~/.kube/config")


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how to prove who we are: everything a REST client needs."""

    server: str
    context: str | None
    namespace: str | None
    ca_data: bytes | None = None
    ca_file: str | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_data: bytes | None = None
    cert_file: str | None = None
    key_data: bytes | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = None
    exec_config: dict[str, Any] | None = None  # users[].user.exec: run by kubetrain.kube.auth
    cluster: str | None = None  # the context's cluster name (a tracked run's kubetrain.cluster tag)
    auth_provider: dict[str, Any] | None = None  # users[].user.auth-provider (gcp, oidc): the kubernetes loader
    user: str | None = None
    kubeconfig: str | None = None  # the KUBECONFIG value (or file) it came from, for that loader
    base_dir: str | None = None  # the directory of the file that defines the user (exec runs there)

    @property
    def needs_plugin(self) -> bool:
        return bool(self.exec_config or self.auth_provider)


@dataclass
class _Merged:
    clusters: dict[str, tuple[dict[str, Any], Path]]
    users: dict[str, tuple[dict[str, Any], Path]]
    contexts: dict[str, dict[str, Any]]
    current: str | None


def config_files(kubeconfig: str | None) -> list[Path]:
    """--kubeconfig, else $KUBECONFIG's entries, else ~/.kube/config (only files that exist)."""
    value = kubeconfig or os.environ.get("KUBECONFIG") or ""
    if kubeconfig:
        paths = [Path(kubeconfig).expanduser()]
        if not paths[0].is_file():
            raise KubeconfigError(f"--kubeconfig {kubeconfig}: no such file")
        return paths
    candidates = [Path(p).expanduser() for p in value.split(os.pathsep) if p] or [DEFAULT.expanduser()]
    return [p for p in candidates if p.is_file()]


def _read(path: Path) -> dict[str, Any]:
    import yaml  # not on the import path of `status`, `list` and `logs` (import budget, docs/performance.md)

    try:
        # libyaml's loader when PyYAML has it: a kubeconfig with inline certificates is ~10 KB, which PyYAML's
        # pure-Python parser takes ~10 ms to read; the C one ~1 ms. Same resolver, same result.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise KubeconfigError(f"{path}: not a readable kubeconfig: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
    return data


def _merge(files: list[Path]) -> _Merged:
    merged = _Merged({}, {}, {}, None)
    for path in files:
        data = _read(path)
        merged.current = merged.current or data.get("current-context") or None
        for section, into in (("clusters", merged.clusters), ("users", merged.users)):
            for entry in data.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") and entry["name"] not in into:
                    into[str(entry["name"])] = (dict(entry.get(section[:-1]) or {}), path.parent)
        for entry in data.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name"):
                merged.contexts.setdefault(str(entry["name"]), dict(entry.get("context") or {}))
    return merged


def load(kubeconfig: str | None = None, context: str | None = None) -> Endpoint | None:
    """The chosen context's Endpoint; None when there is no kubeconfig file at all (in-cluster may apply)."""
    files = config_files(kubeconfig)
    if not files:
        return None
    merged = _merge(files)
    name = context or merged.current
    if not name:
        raise KubeconfigError("no usable kubeconfig (no current-context set); pass --context or "
                              "`kubectl config use-context NAME`")
    if name not in merged.contexts:
        have = ", ".join(merged.contexts) or "none"
        if context:
            raise KubeconfigError(f"--context {context}: no such context in the kubeconfig (have: {have})")
        raise KubeconfigError(f"no usable kubeconfig (current-context {name} is not defined; have: {have})")
    ctx = merged.contexts[name]
    cluster, cluster_dir = merged.clusters.get(str(ctx.get("cluster")), ({}, Path()))
    if not cluster.get("server"):
        raise KubeconfigError(f"no usable kubeconfig (context {name}: cluster {ctx.get('cluster')!r} "
                              "is not defined or has no server)")
    user, user_dir = merged.users.get(str(ctx.get("user")), ({}, Path()))
    source = kubeconfig or os.environ.get("KUBECONFIG") or str(files[0])
    return Endpoint(
        server=str(cluster["server"]).rstrip("/"), context=name, namespace=ctx.get("namespace") or None,
        cluster=str(ctx.get("cluster")),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        ca_file=_path(cluster.get("certificate-authority"), cluster_dir),
        insecure=bool(cluster.get("insecure-skip-tls-verify")), tls_server_name=cluster.get("tls-server-name"),
        cert_data=_b64(user.get("client-certificate-data")),
        cert_file=_path(user.get("client-certificate"), user_dir),
        key_data=_b64(user.get("client-key-data")), key_file=_path(user.get("client-key"), user_dir),
        token=user.get("token") or None, token_file=_path(user.get("tokenFile"), user_dir),
        username=user.get("username") or None, password=user.get("password") or None,
        exec_config=user.get("exec") or None, auth_provider=user.get("auth-provider") or None,
        user=str(ctx.get("user") or "") or None, kubeconfig=source, base_dir=str(user_dir))


def _b64(value: object) -> bytes | None:
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=False)
    except (binascii.Error, ValueError):
        raise KubeconfigError("kubeconfig: a *-data field is not valid base64") from None


def _path(value: object, base: Path) -> str | None:
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else base / path)
