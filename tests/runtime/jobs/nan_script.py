"""A plain training script (no Trainer) for the NaN-injection drill: it prints metrics lines with
kubetrain.metrics, checkpoints with CheckpointStore every EVERY steps and resumes from the newest one.

NAN_AT_STEP=N multiplies the loss by NaN from step N on (the update then makes the parameters NaN too).
CKPT: the checkpoint directory as the pod sees it (mapped by `kubetrain run`); STEPS, EVERY, KEEP.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from kubetrain.metrics import format_metrics
from kubetrain.runtime import CheckpointStore, exit_process, local_path


def main() -> None:
    torch.manual_seed(0)
    steps, every = int(os.environ.get("STEPS", "12")), int(os.environ.get("EVERY", "3"))
    nan_at = int(os.environ.get("NAN_AT_STEP", "0") or 0)
    store = CheckpointStore(local_path(os.environ.get("CKPT", "/ckpt/script")), keep=int(os.environ.get("KEEP", "2")))
    model = nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    if (newest := store.load_newest()) is not None:
        path, state = newest
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        print(format_metrics("resume", rank=0, step=start, path=str(path)), flush=True)
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long()
    for step in range(start + 1, steps + 1):
        loss = nn.functional.cross_entropy(model(x), y)
        if nan_at and step >= nan_at:
            loss = loss * float("nan")
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        line = format_metrics("train", rank=0, step=step, total_steps=steps, epoch=1, loss=float(loss.detach()))
        print(line, flush=True)
        if step % every == 0:
            store.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, step)
            store.prune()
    print(format_metrics("end", rank=0, status="completed", step=steps), flush=True)
    exit_process(0)


if __name__ == "__main__":
    main()
