"""Compiled templates are kept in the user's cache; a cache that cannot be used only costs time."""

from __future__ import annotations

import errno
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain import render
from kubetrain.cli.common import render_loaded
from kubetrain.jobspec.load import load_spec

SPEC = str(Path(__file__).parent / "specs" / "gke-h100.yaml")


@pytest.fixture
def fresh_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A new jinja2 environment (it is cached per process) whose cache is under tmp_path."""
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    render._environment.cache_clear()
    yield tmp_path / "cache"
    render._environment.cache_clear()


def test_templates_compile_once_into_the_cache_and_render_the_same(fresh_environment: Path) -> None:
    first = render_loaded(load_spec(SPEC))
    entries = sorted(p.name for p in (fresh_environment / "templates").iterdir())
    assert entries and all(name.endswith(".cache") for name in entries)
    render._environment.cache_clear()
    assert render_loaded(load_spec(SPEC)) == first  # this time from the compiled code
    assert sorted(p.name for p in (fresh_environment / "templates").iterdir()) == entries


def test_a_cache_path_that_is_a_file_is_ignored(fresh_environment: Path) -> None:
    fresh_environment.mkdir()
    (fresh_environment / "templates").write_text("not a directory")
    assert render_loaded(load_spec(SPEC))[-1]["kind"] == "PyTorchJob"


def test_a_full_disk_while_writing_the_cache_is_ignored(fresh_environment: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", no_space)
    assert render_loaded(load_spec(SPEC))[-1]["kind"] == "PyTorchJob"
    assert not list((fresh_environment / "templates").iterdir())
