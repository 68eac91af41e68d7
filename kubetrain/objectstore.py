"""Object-store URLs (s3://, gs://, az://) as fsspec filesystems: the one place that opens them, for the
runtime's checkpoints and the archive. Light to import (no torch, no pydantic)."""

from __future__ import annotations

from typing import Any

# URL scheme -> (fsspec backend package, kubetrain extra that installs it)
OBJECT_STORE_BACKENDS = {"s3": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
                         "az": ("adlfs", "azure"), "abfs": ("adlfs", "azure")}


class BackendMissing(Exception):
    """The fsspec backend for a URL's scheme is not installed; str() names the field and what to install."""


def url_filesystem(url: str, field: str) -> tuple[Any, str]:
    """(fsspec filesystem, path without the scheme and trailing slash) for `url` (a local path works too)."""
    scheme = url.partition("://")[0]
    try:
        # only for an archive or object-store checkpoint (render/validate import budget)
        from fsspec.core import url_to_fs

        fs, path = url_to_fs(url)
    except ImportError as exc:
        package, extra = OBJECT_STORE_BACKENDS.get(scheme, ("fsspec", "s3"))
        raise BackendMissing(f"{field}: {scheme}:// needs the {package} package "
                             f"(pip install 'kubetrain[{extra}]'): {exc}") from None
    return fs, str(path).rstrip("/")


def backend_requirements(urls: list[str | None]) -> list[str]:
    """The pip requirements (as kubetrain's extras pin them) of the fsspec backends that `urls` need: what an
    image must contain for a job whose checkpoint.dir or archive is an object store."""
    # only for an archive or object-store checkpoint (render/validate import budget)
    from importlib.metadata import PackageNotFoundError, requires

    schemes = {url.partition("://")[0] for url in urls if url and "://" in url}
    extras = {OBJECT_STORE_BACKENDS[s][1] for s in schemes if s in OBJECT_STORE_BACKENDS}
    try:
        declared = requires("kubetrain") or []
    except PackageNotFoundError:  # not installed (a bare source tree): the package names alone
        return sorted({p for p, e in OBJECT_STORE_BACKENDS.values() if e in extras})
    wanted = []
    for requirement in declared:
        spec, _, marker = requirement.partition(";")
        if any(marker.replace('"', "'").strip() == f"extra == '{extra}'" for extra in extras):
            wanted.append(spec.strip())
    return wanted

