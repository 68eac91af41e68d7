"""strategy fsdp with fsdp.metaInit, with two real processes (torchrun, gloo, CPU): no rank ever holds the whole
model, the shards are initialised like the unsharded layers, and checkpoint/resume stays bit-exact."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.helpers import JOBS, REPO, quiet_env
from tests.runtime.torchmod import require_torch

torch = require_torch()
from torch import nn  # noqa: E402

from kubetrain.runtime import Factories, Trainer  # noqa: E402
from kubetrain.runtime.config import RuntimeConfigError  # noqa: E402
from kubetrain.runtime.settings import FSDP, Train  # noqa: E402

pytestmark = [pytest.mark.torch]
MiB = 2**20


def torchrun(*args: str) -> None:
    env = quiet_env(PYTHONPATH=f"{REPO}:{JOBS}")
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             str(JOBS / "meta_init_task.py"), *args], env=env, cwd=JOBS, capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three torchruns, each a fresh pair of processes: a memory measure first, then training in them.
    a: meta memory, then two epochs in one go; b: eager memory, then one epoch; then b resumed for the second."""
    out = tmp_path_factory.mktemp("meta-init")
    torchrun("memory", "meta", str(out), str(out / "a"), "2")
    torchrun("memory", "eager", str(out), str(out / "b"), "1")
    torchrun("train", str(out / "b"), "2")
    return out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_rank_holds_the_whole_model(runs: Path) -> None:
    """A 512 MiB model, a per-process cap of 90% of it on the RSS growth of building, sharding and
    initialising: the meta-initialised run fits on both ranks; building it whole first (metaInit false) does
    not, which shows the measure can fail."""
    meta = [json.loads((runs / f"memory-meta-{rank}.json").read_text()) for rank in (0, 1)]
    eager = [json.loads((runs / f"memory-eager-{rank}.json").read_text()) for rank in (0, 1)]
    full = meta[0]["full"]
    cap = 0.9 * full
    assert full == 512 * MiB
    for rank in meta:
        assert rank["local"] == full // 2  # each rank allocated its half, nothing else
        assert rank["growth"] < cap, f"meta init grew by {rank['growth'] / MiB:.0f} MiB (cap {cap / MiB:.0f} MiB)"
        # nn.Linear's reset_parameters on the shard: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) of the full layer
        bound = rank["bound"]
        assert -bound <= rank["min"] < -0.99 * bound and 0.99 * bound < rank["max"] <= bound
        assert rank["std"] == pytest.approx(rank["bound"] / 3**0.5, rel=0.01)
    assert all(rank["growth"] > full for rank in eager)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_meta_init_resume_is_bit_exact(runs: Path) -> None:
    """Two epochs in one go, against one epoch, then resumed for the second: the final sharded checkpoints
    (model and SGD momentum) are identical."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    states = []
    for run in ("a", "b"):
        dcp_to_torch_save(runs / run / "step-0000000008", runs / f"{run}.pt")
        states.append(torch.load(runs / f"{run}.pt", weights_only=False))
    a, b = states
    assert sorted(a["model"]) == ["first.bias", "first.weight", "second.bias", "second.weight"]
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key, state in a["optimizer"]["state"].items():
        assert torch.equal(state["momentum_buffer"], b["optimizer"]["state"][key]["momentum_buffer"]), key
    assert json.dumps(a["optimizer"]["param_groups"], default=str) == json.dumps(b["optimizer"]["param_groups"],
                                                                                  default=str)


class NoReset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: Any) -> Any:
        return x * self.scale


class OwnInit(NoReset):
    def init_weights(self) -> None:
        self.scale.fill_(2.0)


def _fit(model: type[nn.Module]) -> Trainer:
    x = torch.randn(8, 4)
    trainer = Trainer(Train(model="m:f", dataset="m:d", strategy="fsdp", backend="gloo", fsdp=FSDP(metaInit=True)),
                      factories=Factories(model=model, dataset=lambda: torch.utils.data.TensorDataset(x, x),
                                          loss=nn.MSELoss), stream=io.StringIO())
    trainer.fit()
    return trainer


def test_a_parameter_nobody_initialises_is_refused() -> None:
    with pytest.raises(RuntimeConfigError, match=r"spec.train.fsdp.metaInit: the model itself: parameters but no "
                                                 r"reset_parameters\(\)"):
        _fit(NoReset)


def test_the_models_own_init_weights_is_used() -> None:
    _fit(OwnInit)  # raises if init_weights were not found (NoReset's own modules have no reset_parameters)
