"""Checkpoints on object storage (`checkpoint.dir: s3://bucket/prefix`, gs://, az://), through fsspec.

Object stores have no atomic rename of a directory (s3fs's rename is a copy and a delete per object), so
publication works differently from the local CheckpointStore: a checkpoint is the prefix `<dir>/step-<N>/`
holding its objects, and it counts only once its manifest `<dir>/step-<N>/MANIFEST.json` exists. The
manifest is written last, after every object (every rank's shards too) is complete; it lists each object
with its size, and resume checks those sizes before loading. A prefix without a manifest is a write that
did not finish: resume ignores it, reports it on stderr and removes it (nobody is writing then).

- full checkpoints (ddp, dp): one object `state.pt` (a torch.save zip), written by rank 0;
- sharded checkpoints (fsdp): torch.distributed.checkpoint's FsspecWriter writes every rank's shards and
  `.metadata`, rank 0 adds `meta.pt`; FsspecReader reads them back, resharding as locally.

The backend is whichever fsspec implementation the scheme names: s3fs for s3:// (`pip install
'kubetrain[s3]'`), gcsfs for gs://, adlfs for az://. Credentials and endpoints come from the backend's usual
environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL_S3 for MinIO and other S3-compatible servers, ...).
"""

from __future__ import annotations

import importlib
import io
import json
import time
from typing import Any

import torch

from kubetrain.objectstore import OBJECT_STORE_BACKENDS, BackendMissing, url_filesystem
from kubetrain.runtime.checkpoint import FORMAT_VERSION, NAME_RE, SHARDED_META, CheckpointStore, StoreBase
from kubetrain.runtime.config import RuntimeConfigError

MANIFEST = "MANIFEST.json"
STATE = "state.pt"


def fsspec_dcp() -> Any:
    """torch's DCP storage on fsspec, imported only for sharded checkpoints on an object store. Its public name
    `torch.distributed.checkpoint.fsspec_filesystem` is newer than the private `_fsspec_filesystem` (torch
    2.11 has only the private one), and importing it at module level kept every Trainer from starting there."""
    try:
        return importlib.import_module("torch.distributed.checkpoint.fsspec_filesystem")
    except ModuleNotFoundError:
        return importlib.import_module("torch.distributed.checkpoint._fsspec_filesystem")


def object_store_url(directory: str | None) -> bool:
    """True for a URL of a supported object store (s3://, gs://, az://, ...)."""
    scheme, sep, _ = (directory or "").partition("://")
    return bool(sep) and scheme in OBJECT_STORE_BACKENDS


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path without the scheme) for `url`; a missing backend is one clear line."""
    try:
        return url_filesystem(url, "spec.checkpoint.dir")
    except BackendMissing as exc:
        raise RuntimeConfigError(str(exc)) from None


class ObjectCheckpointStore(StoreBase):
    """CheckpointStore's interface on an object store. Only rank 0 lists, publishes and prunes."""

    def __init__(self, url: str, keep: int = 3) -> None:
        self.url = url.rstrip("/")
        self.keep = keep
        self.fs, self.root = filesystem(self.url)
        self.scheme = self.url.split("://", 1)[0]

    # --- names ----------------------------------------------------------------------------------------
    def checkpoint_url(self, step: int) -> str:
        return f"{self.url}/step-{step:010d}"

    def _path(self, url: str) -> str:
        """The filesystem path (no scheme) of a URL below this store."""
        return self.root + url[len(self.url):]

    def _steps(self) -> dict[int, bool]:
        """step -> has a manifest, for every step-<N>/ prefix (one recursive listing)."""
        self.fs.invalidate_cache()  # listings are cached per process; other processes write here
        try:
            objects = self.fs.find(self.root)
        except FileNotFoundError:
            return {}
        found: dict[int, bool] = {}
        for name in objects:
            prefix, _, leaf = str(name)[len(self.root) + 1:].partition("/")
            match = NAME_RE.match(prefix)
            if match and not match.group(2):
                step = int(match.group(1))
                found[step] = found.get(step, False) or leaf == MANIFEST
        return found

    # --- the CheckpointStore interface ----------------------------------------------------------------
    def complete(self) -> list[tuple[int, str]]:
        """(step, url) of every checkpoint with a manifest, newest first."""
        return sorted(((step, self.checkpoint_url(step)) for step, done in self._steps().items() if done),
                      reverse=True)

    def is_sharded(self, url: str) -> bool:
        return bool(self.manifest(url)["sharded"])

    def manifest(self, url: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.fs.cat_file(f"{self._path(url)}/{MANIFEST}"))
        return data

    def save(self, state: dict[str, Any], step: int) -> str:
        """Rank 0: write state.pt, then the manifest (the checkpoint exists from that moment on)."""
        self.refuse_nonfinite(state, step)
        url = self.checkpoint_url(step)
        buffer = io.BytesIO()
        torch.save({"format": FORMAT_VERSION, **state}, buffer)
        self.fs.pipe_file(f"{self._path(url)}/{STATE}", buffer.getvalue())
        self.publish(url, sharded=False)
        return url

    # --- sharded (DCP) checkpoints: kubetrain.runtime.sharded -----------------------------------------
    def sharded_target(self, step: int) -> tuple[str, str]:
        """DCP writes in place: the manifest, written last, is what publishes."""
        url = self.checkpoint_url(step)
        return url, url

    def publish_sharded(self, tmp: str, final: str) -> None:
        self.publish(final, sharded=True)

    def dcp_writer(self, url: str) -> Any:
        return fsspec_dcp().FsspecWriter(url)

    def dcp_reader(self, url: str) -> Any:
        self.verify(url)
        return fsspec_dcp().FsspecReader(url)

    def write_meta(self, url: str, meta: dict[str, Any]) -> None:
        buffer = io.BytesIO()
        torch.save(meta, buffer)
        self.fs.pipe_file(f"{self._path(url)}/{SHARDED_META}", buffer.getvalue())

    def read_meta(self, url: str) -> dict[str, Any]:
        meta: dict[str, Any] = torch.load(io.BytesIO(self.fs.cat_file(f"{self._path(url)}/{SHARDED_META}")),
                                          map_location="cpu", weights_only=True)
        return meta

    def publish(self, url: str, sharded: bool) -> None:
        """Write the manifest last: every object of the checkpoint, with its size."""
        path = self._path(url)
        self.fs.invalidate_cache()
        objects = {name[len(path) + 1:]: int(size) for name, size in self.fs.du(path, total=False).items()
                   if not name.endswith(MANIFEST)}
        manifest = {"format": FORMAT_VERSION, "sharded": sharded, "objects": objects,
                    "created": time.time()}
        self.fs.pipe_file(f"{path}/{MANIFEST}", json.dumps(manifest, sort_keys=True).encode())

    def remove(self, url: str) -> None:
        """Delete a checkpoint: its manifest first, so a half-deleted one is never complete."""
        path = self._path(url)
        if self.fs.exists(f"{path}/{MANIFEST}"):
            self.fs.rm_file(f"{path}/{MANIFEST}")
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def clean_partial(self) -> list[str]:
        """Remove step prefixes without a manifest (call only when nobody is writing)."""
        partial = [self.checkpoint_url(step) for step, done in sorted(self._steps().items()) if not done]
        for url in partial:
            self.remove(url)
        return partial

    def verify(self, url: str) -> None:
        """Every object the manifest lists is there, at its size (a store that lost objects is damage)."""
        path = self._path(url)
        self.fs.invalidate_cache()
        for name, size in self.manifest(url)["objects"].items():
            actual = self.fs.size(f"{path}/{name}")
            if actual != size:
                raise ValueError(f"{url}/{name}: {actual} bytes, the manifest says {size}")

    def load(self, url: str) -> dict[str, Any]:
        self.verify(url)
        data = self.fs.cat_file(f"{self._path(url)}/{STATE}")
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
            raise ValueError(f"{url}: not a kubetrain checkpoint (format {FORMAT_VERSION})")
        return state


def open_store(directory: str, keep: int) -> StoreBase:
    """The store for `checkpoint.dir`: a local directory, or an object store for s3://, gs://, az://."""
    return ObjectCheckpointStore(directory, keep) if object_store_url(directory) else CheckpointStore(directory, keep)
