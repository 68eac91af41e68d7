"""Script mode: a plain PyTorch DDP training script, written the way the DDP tutorials write them.

kubetrain starts it with torchrun (`command: [python, train_ddp.py]`), which sets RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT - locally under `kubetrain run`, in a pod from the operator's PET_*
variables. Nothing here depends on kubetrain except the optional metrics line, so `kubetrain submit
--follow` can show progress. Run it:

    kubetrain run -f examples/digits/kubetrain-script.yaml
    torchrun --nproc-per-node 2 examples/digits/train_ddp.py --epochs 3     # or plain torchrun
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from digits_task import build_datasets, build_model
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

try:
    from kubetrain.metrics import format_metrics
except ImportError:  # kubetrain is optional for a script
    format_metrics = None


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> float:
    correct = torch.zeros(2, device=device)
    model.eval()
    with torch.no_grad():
        for batch_images, batch_labels in loader:
            images, labels = batch_images.to(device), batch_labels.to(device)
            correct[0] += (model(images).argmax(dim=1) == labels).sum()
            correct[1] += len(labels)
    model.train()
    dist.all_reduce(correct)
    return (correct[0] / correct[1]).item()


def train(args: argparse.Namespace, device: torch.device, use_cuda: bool) -> None:
    rank = dist.get_rank()
    torch.manual_seed(0)
    train_set, test_set = build_datasets()
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler, pin_memory=use_cuda)
    test_loader = DataLoader(test_set, batch_size=256,
                             sampler=DistributedSampler(test_set, shuffle=False, drop_last=True))
    model = DDP(build_model().to(device), device_ids=[device.index] if use_cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch_images, batch_labels in loader:
            images, labels = batch_images.to(device), batch_labels.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
        accuracy = evaluate(model.module, test_loader, device)
        if rank == 0:
            print(f"epoch {epoch + 1}: loss {loss.item():.4f}, held-out accuracy {accuracy:.4f}", flush=True)
            if format_metrics:
                print(format_metrics("eval", rank=0, epoch=epoch + 1, eval_accuracy=accuracy), flush=True)
    if rank == 0:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), args.out)
        print(f"saved {args.out}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--out", default="model.pt", help="where rank 0 saves the trained weights")
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    try:
        train(args, device, use_cuda)  # the DDP model lives (and dies) inside train()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
