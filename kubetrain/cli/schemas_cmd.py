"""kubetrain schemas fetch|list."""

from __future__ import annotations

import click

from kubetrain.cli.output import handle_errors, info
from kubetrain.validate.fetch import PINNED, fetch_pinned
from kubetrain.validate.schemas import cached_crds, crd_versions, schema_cache_dir


@click.group()
def schemas() -> None:
    """Fetch and list the CRD schemas used by `kubetrain validate`.

    \b
    Examples:
      kubetrain schemas fetch
      kubetrain schemas list
    """


@schemas.command()
@click.option("--base-url", default=None, metavar="URL",
              help="A mirror holding each pinned file as <tag>/<path in its repository> (default: GitHub; or "
                   "$KUBETRAIN_SCHEMA_BASE_URL).")
@handle_errors
def fetch(base_url: str | None) -> None:
    """Download the pinned upstream CRDs into the cache and check their sha256.

    \b
    Examples:
      kubetrain schemas fetch
      kubetrain schemas fetch --base-url https://mirror.example.com/crds
    """
    for path in fetch_pinned(base_url):
        click.echo(str(path))
    info(f"cached {len(PINNED)} pinned CRD(s) in {schema_cache_dir()}")


@schemas.command(name="list")
@handle_errors
def list_schemas() -> None:
    """List the cached CRD schemas (apiVersion, kind, file).

    \b
    Examples:
      kubetrain schemas list
    """
    found = [(v.api_version, v.kind, source) for crd, source in cached_crds() for v in crd_versions(crd, source)]
    for api_version, kind, source in found:
        click.echo(f"{api_version}\t{kind}\t{source}")
    if not found:
        info(f"no cached schemas in {schema_cache_dir()}: run `kubetrain schemas fetch`")
