"""Checkpoint files: atomic writes, newest-complete lookup, retention.

Layout: one file per checkpoint, `<dir>/step-<optimizer step, 10 digits>.pt` (a torch.save zip). It is
written as `<dir>/.tmp-step-<N>.pt.<pid>`, fsync'd, renamed to its final name (atomic on POSIX) and the
directory is fsync'd. Only final names count as checkpoints, so one cut off mid-write is never loaded; its
temp file is removed on the next start. A final-named file that still fails to load (a damaged disk) is
skipped in favour of the next older one.

A state whose model or optimizer holds NaN or inf is refused (NonFiniteCheckpoint): it would replace a good
checkpoint, and rotation would delete the good ones. Resume skips such files written by older versions.

Sharded checkpoints (strategy fsdp, kubetrain.runtime.sharded) are directories `<dir>/step-<N>/`, written
as `<dir>/.tmp-step-<N>/` by every rank and renamed by rank 0 once complete; the same rules apply.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from kubetrain.runtime.divergence import any_nonfinite, floating_tensors

NAME_RE = re.compile(r"^step-(\d{10})(\.pt)?$")  # a file (.pt) or a sharded directory
TMP_PREFIX = ".tmp-"
FORMAT_VERSION = 1
SHARDED_META = "meta.pt"  # position, scheduler and RNG states in a sharded checkpoint (rank 0 writes it)


class NonFiniteCheckpoint(ValueError):
    """A checkpoint whose model or optimizer state holds NaN or inf was not written: it would replace (and
    rotation would then delete) a good one."""

    def __init__(self, step: int) -> None:
        super().__init__(f"checkpoint at step {step} not written: its model or optimizer state holds NaN or inf "
                         "(the previous checkpoint stands)")


def is_finite_state(state: dict[str, Any]) -> bool:
    """Whether a checkpoint's model and optimizer state (those it holds) are finite."""
    return not any_nonfinite(floating_tensors([state.get("model"), state.get("optimizer")]))


def checkpoint_name(step: int) -> str:
    return f"step-{step:010d}.pt"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    """Delete a checkpoint file or directory (gone already is fine)."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def publish(tmp: Path, final: Path) -> None:
    """Rename a complete temp file or directory to its final name (atomic on POSIX), then fsync the dir."""
    if final.is_dir():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(final.parent)


class StoreBase:
    """What a local directory and an object store (kubetrain.runtime.objstore) share: retention and
    the newest-loadable lookup, in terms of complete(), load() and remove()."""

    keep: int

    def complete(self) -> list[tuple[int, Any]]:
        raise NotImplementedError

    def load(self, path: Any) -> dict[str, Any]:
        raise NotImplementedError

    def is_sharded(self, path: Any) -> bool:
        raise NotImplementedError

    def save(self, state: dict[str, Any], step: int) -> Any:
        raise NotImplementedError

    def clean_partial(self) -> list[Any]:
        raise NotImplementedError

    def remove(self, path: Any) -> None:
        raise NotImplementedError

    def refuse_nonfinite(self, state: dict[str, Any], step: int) -> None:
        """Raise NonFiniteCheckpoint for a state that holds NaN or inf (called by every save)."""
        if not is_finite_state(state):
            raise NonFiniteCheckpoint(step)

    def prune(self) -> list[Any]:
        """Delete all but the newest `keep` complete checkpoints; returns what was deleted."""
        removed = [path for _, path in self.complete()[self.keep:]]
        for path in removed:
            self.remove(path)
        return removed

    def load_newest(self) -> tuple[Any, dict[str, Any]] | None:
        """The newest checkpoint that loads and is finite; damaged ones and ones holding NaN or inf (written
        before kubetrain refused them) are reported on stderr and skipped."""
        for _, path in self.complete():
            started = time.monotonic()
            try:
                state = self.load(path)
            except Exception as exc:  # a damaged file must not stop the job: fall back to an older one
                print(f"kubetrain.runtime: warning: skipping unreadable checkpoint {path} "
                      f"({type(exc).__name__}: {exc}; {time.monotonic() - started:.1f}s)", file=sys.stderr)
                continue
            if is_finite_state(state):
                return path, state
            print(f"kubetrain.runtime: warning: skipping checkpoint {path}: its parameters hold NaN or inf",
                  file=sys.stderr)
        return None


class CheckpointStore(StoreBase):
    """A directory of checkpoints. Only rank 0 writes; every rank may read."""

    def __init__(self, directory: str | Path, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.keep = keep

    def complete(self) -> list[tuple[int, Path]]:
        """(step, path) of every complete checkpoint, newest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = NAME_RE.match(path.name)
            if match and path.is_dir() != bool(match.group(2)):
                found.append((int(match.group(1)), path))
        return sorted(found, reverse=True)

    def is_sharded(self, path: str | Path) -> bool:
        return Path(path).is_dir()

    def save(self, state: dict[str, Any], step: int) -> Path:
        """Write atomically: temp file, flush + fsync, rename, fsync the directory."""
        self.refuse_nonfinite(state, step)
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / checkpoint_name(step)
        tmp = self.directory / f"{TMP_PREFIX}{final.name}.{os.getpid()}"
        try:
            with open(tmp, "wb") as handle:
                torch.save({"format": FORMAT_VERSION, **state}, handle)
                handle.flush()
                os.fsync(handle.fileno())
            publish(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return final

    def remove(self, path: str | Path) -> None:
        remove(Path(path))

    def clean_partial(self) -> list[Path]:
        """Remove temp files left by a writer that died mid-write (call only when nobody is writing)."""
        if not self.directory.is_dir():
            return []
        partial = [path for path in self.directory.iterdir() if path.name.startswith(TMP_PREFIX)]
        for path in partial:
            remove(path)
        return partial

    def load(self, path: str | Path) -> dict[str, Any]:
        """Load one checkpoint onto the CPU (tensors, numbers and strings only: weights_only)."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
            raise ValueError(f"{path}: not a kubetrain checkpoint (format {FORMAT_VERSION})")
        return state

    # --- sharded (DCP) checkpoints: kubetrain.runtime.sharded -----------------------------------------
    def sharded_target(self, step: int) -> tuple[Path, Path]:
        """(where DCP writes, where the checkpoint is published)."""
        final = self.directory / f"step-{step:010d}"
        return self.directory / f"{TMP_PREFIX}{final.name}", final

    def write_meta(self, tmp: str | Path, meta: dict[str, Any]) -> None:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        with open(Path(tmp) / SHARDED_META, "wb") as handle:
            torch.save(meta, handle)
            handle.flush()
            os.fsync(handle.fileno())

    def read_meta(self, path: str | Path) -> dict[str, Any]:
        meta: dict[str, Any] = torch.load(Path(path) / SHARDED_META, map_location="cpu", weights_only=True)
        return meta

    def publish_sharded(self, tmp: str | Path, final: str | Path) -> None:
        publish(Path(tmp), Path(final))

    def dcp_writer(self, tmp: str | Path) -> Any:
        from torch.distributed.checkpoint.filesystem import FileSystemWriter  # only for strategy fsdp (sharded.py)

        return FileSystemWriter(str(tmp))

    def dcp_reader(self, path: str | Path) -> Any:
        from torch.distributed.checkpoint.filesystem import FileSystemReader

        return FileSystemReader(str(path))
