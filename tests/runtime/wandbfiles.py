"""What an offline W&B run wrote: its ID and the steps of its history, read from the run's `.wandb` file.

wandb no longer ships a reader for its own files (the Go core writes them), so this reads the format directly:
a 7-byte file header (`:W&B`, magic 0xBEE1, version 0), then LevelDB log framing (32 KiB blocks; each chunk a
7-byte header: CRC-32, length, type full/first/middle/last; a block's last < 7 bytes are padding), each
record one protobuf `wandb.proto.wandb_internal_pb2.Record`.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    """The records of one `.wandb` file, in order (a torn last record, as kill -9 leaves, is dropped)."""
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    out: list[bytes] = []
    pending = b""
    offset = HEADER
    while offset + HEADER <= len(data):
        if BLOCK - offset % BLOCK < HEADER:
            offset += BLOCK - offset % BLOCK  # padding at a block's end
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset:offset + HEADER])
        chunk = data[offset + HEADER:offset + HEADER + length]
        offset += HEADER + length
        if kind == 0 or len(chunk) < length:
            break  # zero fill or a torn write
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            out.append(pending)
    return out


@dataclass
class OfflineRun:
    run_id: str
    steps: dict[str, list[int]] = field(default_factory=dict)  # metric -> the steps logged, in order


def read_offline_run(directory: Path) -> OfflineRun:
    """One `offline-run-*` directory: the run's ID and the step of every point of its history."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = directory.glob("run-*.wandb")
    run = OfflineRun("")
    for data in records(path):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id = record.run.run_id
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                     for item in record.history.item}
            step = int(record.history.step.num) if record.history.HasField("step") else int(items["_step"])
            for key in items:
                if not key.startswith("_"):
                    run.steps.setdefault(key, []).append(step)
    return run
