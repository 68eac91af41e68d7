"""kubetrain init."""

from __future__ import annotations

from pathlib import Path

import click

from kubetrain.cli.common import write_atomically
from kubetrain.cli.output import handle_errors, info
from kubetrain.errors import UsageError
from kubetrain.jobspec.load import DEFAULT_SPEC

STARTER = Path(__file__).resolve().parent.parent / "jobspec" / "starter.yaml"


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
@click.option("--name", default=None, help="Job name to write into the spec (default: the directory's name).")
@click.option("--force", is_flag=True, help="Overwrite an existing kubetrain.yaml.")
@handle_errors
def init(directory: Path, name: str | None, force: bool) -> None:
    """Write a commented starter kubetrain.yaml into DIRECTORY (default: here).

    \b
    Examples:
      kubetrain init
      kubetrain init my-project --name digits-ddp
    """
    target = directory / DEFAULT_SPEC
    if target.exists() and not force:
        raise UsageError(f"{target} already exists (use --force to overwrite)")
    job_name = name or _name_from(directory.resolve().name)
    text = STARTER.read_text(encoding="utf-8").replace("my-training-job", job_name)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{directory}: cannot create: {exc.strerror}") from None
    write_atomically(target, text)
    click.echo(str(target))
    info(f"wrote {target}; next: kubetrain render -f {target}")


def _name_from(text: str) -> str:
    """A directory name made into a valid job name (RFC 1035 label)."""
    cleaned = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    cleaned = "-".join(filter(None, cleaned.split("-")))[:40].rstrip("-")
    return cleaned if cleaned[:1].isalpha() else f"job-{cleaned}".rstrip("-")
