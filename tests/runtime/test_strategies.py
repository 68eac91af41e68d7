"""Strategies and numerics with two real processes (gloo, CPU): accumulation, autocast, FSDP2 vs DDP, resharded
resume; plus the single-process pieces (dp, watchdog, warnings, partial checkpoints, launcher exit codes)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.helpers import JOBS, REPO, quiet_env
from tests.runtime.torchmod import require_torch

torch = require_torch()
from kubetrain.metrics import parse_metrics_line  # noqa: E402
from kubetrain.runtime import Factories, Trainer, TrainingStopped  # noqa: E402
from kubetrain.runtime.checkpoint import CheckpointStore  # noqa: E402
from kubetrain.runtime.config import RuntimeConfigError  # noqa: E402
from kubetrain.runtime.distributed import DistEnv  # noqa: E402
from kubetrain.runtime.launch import failure_exit_code, worker_exit_code  # noqa: E402
from kubetrain.runtime.settings import FSDP, Checkpoint, Train  # noqa: E402
from kubetrain.runtime.stop import StopSignal  # noqa: E402

pytestmark = [pytest.mark.torch]
sys.path.insert(0, str(JOBS))
import numerics_task  # noqa: E402

FSDP_PROBE = {"model": "numerics_task:Probe", "dataset": "numerics_task:data", "optimizer": "numerics_task:sgd",
              "lr": 0.1, "seed": 3, "logEvery": 1, "batchSize": 16, "strategy": "fsdp", "backend": "gloo"}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> tuple[Path, list[dict[str, Any]]]:
    """jobs/numerics_task.py under torchrun with 2 workers (one launch for all the two-process checks); before
    it, a one-process fsdp run writes OUT/one for the 1 -> 2 resharded resume; NUMERICS_S3_URL for S3."""
    out = tmp_path_factory.mktemp("numerics")
    stream = io.StringIO()
    Trainer(Train(**FSDP_PROBE, epochs=1), Checkpoint(dir=str(out / "one")), stream=stream).fit()
    one = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r and r["kind"] == "eval"]
    (out / "one-eval.json").write_text(json.dumps(one[-1]["eval_loss"]))
    (out / "s3-url").write_text(f"{s3_server.bucket('dcp')}/fsdp")
    env = quiet_env(PYTHONPATH=os.pathsep.join([str(REPO), str(JOBS)]), KUBETRAIN_LOG_ALL_RANKS="1",
                    NUMERICS_S3_URL=(out / "s3-url").read_text(), **s3_server.env())
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             str(JOBS / "numerics_task.py"), str(out)], env=env, cwd=JOBS, capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return out, [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


def flat(params: list[list[float]]) -> Any:
    return torch.tensor([value for tensor in params for value in tensor], dtype=torch.float64)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_accumulation_k2_equals_the_double_batch_with_one_reduction_per_step(two_ranks: Any) -> None:
    """gradAccumSteps 2 x batch 8 == batch 16, step by step, on 2 ranks; the last group is a full and a short
    micro-batch (8 + 4 samples), weighted by samples like the 12-sample last batch of k1."""
    _, ranks = two_ranks
    for result in ranks:
        k1, k2 = result["k1"], result["k2"]
        assert len(k1["losses"]) == len(k2["losses"]) == 7  # ceil(108 / 16) optimizer steps
        # the logged loss of k2's last step is the mean of two micro-batch means, not a per-sample mean
        assert k1["losses"][:-1] == pytest.approx(k2["losses"][:-1], rel=1e-6)
        assert torch.allclose(flat(k1["params"]), flat(k2["params"]), atol=1e-6)
        assert k1["reductions"] == k2["reductions"] == 7  # k2: 14 micro-batches, 7 gradient allreduces
    assert ranks[0]["k2"]["params"] == ranks[1]["k2"]["params"]  # replicas stay identical


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_autocast_really_computes_in_bf16_under_ddp_and_fsdp(two_ranks: Any) -> None:
    _, ranks = two_ranks
    for result in ranks:
        assert result["k1"]["dtypes"] == ["torch.float32"]
        assert result["bf16_ddp"]["dtypes"] == ["torch.bfloat16"]
        assert result["bf16_fsdp"]["dtypes"] == ["torch.bfloat16"]  # FSDP2's MixedPrecisionPolicy


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fsdp_matches_ddp_and_resumes_resharded_on_one_process(two_ranks: Any) -> None:
    out, ranks = two_ranks
    ddp, fsdp = ranks[0]["k1"], ranks[0]["fsdp"]
    assert fsdp["losses"] == pytest.approx(ddp["losses"], rel=1e-5)  # same seed, data, optimizer
    assert torch.allclose(flat(fsdp["params"]), flat(ddp["params"]), atol=1e-5)
    store = CheckpointStore(out / "ckpt")
    assert [path.name for _, path in store.complete()] == [f"step-{n:010d}" for n in (7, 6, 3)]
    assert sorted(p.name for p in (out / "ckpt" / "step-0000000007").iterdir()) == [
        ".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    # written by 2 ranks, loaded by 1: the finished run is evaluated again with the resharded weights
    train = Train(**FSDP_PROBE)
    stream = io.StringIO()
    result = Trainer(train, Checkpoint(dir=str(out / "ckpt")), stream=stream).fit()
    records = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r]
    assert result.resumed_from and result.resumed_from.endswith("step-0000000007")
    assert [r["eval_loss"] for r in records if r["kind"] == "eval"] == pytest.approx(fsdp["eval_loss"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fsdp_resumes_resharded_from_one_process_onto_two(two_ranks: Any) -> None:
    """Written by 1 process (the fixture), resumed by 2: each rank loads its half of every parameter; the
    finished run is evaluated again with identical held-out loss."""
    out, ranks = two_ranks
    expected = json.loads((out / "one-eval.json").read_text())
    for result in ranks:
        reshard = result["reshard"]
        assert reshard["resumed"] and reshard["resumed"][0]["path"].endswith("step-0000000014")  # 216 samples / 16
        assert reshard["eval_loss"] == pytest.approx([expected], rel=1e-6)
        assert reshard["losses"] == []  # nothing left to train: only the resharded weights were used


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_profiler_on_two_ranks_traces_only_the_selected_rank(two_ranks: Any) -> None:
    out, ranks = two_ranks
    assert ranks[0]["profile"]["profiles"] == []  # rank 0 not selected: no records, no traces
    assert not (out / "prof" / "rank-0").exists()
    records = ranks[1]["profile"]["profiles"]
    assert [r["step"] for r in records] == [4] and records[0]["rank"] == 1
    assert records[0]["top"] and {"op", "self_ms", "self_mem_mb"} <= set(records[0]["top"][0])
    traces = list((out / "prof" / "rank-1").glob("*.pt.trace.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert any(event.get("name") == "gloo:all_reduce" or "all_reduce" in str(event.get("name")) for event in events)
    assert "Self CPU" in Path(records[0]["summary"]).read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fsdp_sharded_checkpoints_on_s3_resume_resharded(two_ranks: Any, s3_server: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """DCP through FsspecWriter on S3, async: every kept checkpoint has its shards, .metadata, meta.pt and then
    the manifest (sharded: true); retention keeps 3; one process resumes it (2 -> 1) as from a directory."""
    from kubetrain.runtime.objstore import MANIFEST, ObjectCheckpointStore

    out, ranks = two_ranks
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    s3_url = (out / "s3-url").read_text()
    store = ObjectCheckpointStore(s3_url, keep=3)
    assert [step for step, _ in store.complete()] == [7, 6, 3]
    fs = s3_server.filesystem()
    for _, ckpt in store.complete():
        names = sorted(path.rsplit("/", 1)[-1] for path in fs.find(ckpt.removeprefix("s3://")))
        assert names == [".metadata", MANIFEST, "__0_0.distcp", "__1_0.distcp", "meta.pt"]
        assert store.manifest(ckpt)["sharded"] is True
    stream = io.StringIO()
    result = Trainer(Train(**FSDP_PROBE), Checkpoint(dir=s3_url), stream=stream).fit()
    lines = map(parse_metrics_line, stream.getvalue().splitlines())
    evals = [r["eval_loss"] for r in lines if r and r["kind"] == "eval"]
    assert result.resumed_from == f"{s3_url}/step-0000000007"
    assert evals == pytest.approx(ranks[0]["fsdp_s3"]["eval_loss"], rel=1e-6)
    assert ranks[0]["fsdp_s3"]["losses"] == pytest.approx(ranks[0]["fsdp"]["losses"], rel=1e-6)


def test_dp_strategy_trains_in_one_process_and_refuses_a_world() -> None:
    train = Train(model="numerics_task:Probe", dataset="numerics_task:data", epochs=2, batchSize=16, lr=0.1,
                  strategy="dp", logEvery=1)
    stream = io.StringIO()
    result = Trainer(train, None, Factories(numerics_task.Probe, numerics_task.data), stream=stream).fit()
    assert result.eval_accuracy is not None and result.eval_accuracy > 0.7
    from kubetrain.runtime.wrap import wrap_model

    env = DistEnv(rank=0, world_size=2, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    with pytest.raises(RuntimeConfigError, match=r"spec\.train\.strategy: dp runs one process"):
        wrap_model(numerics_task.Probe(), train, env)


def test_fsdp_wrap_classes_must_exist() -> None:
    from kubetrain.runtime.fsdp import shard_units

    model = numerics_task.Probe()
    assert shard_units(model, []) == [model.first, model.second]
    assert shard_units(model, ["Linear"]) == [model.first, model.second]
    with pytest.raises(RuntimeConfigError, match=r"spec\.train\.fsdp\.wrapClasses: no module of class "
                                                 r"\['Block'\] in the model \(its classes: Linear, Probe\)"):
        shard_units(model, ["Block"])
    train = Train(model="m:f", dataset="m:d", strategy="fsdp", precision="fp16", fsdp=FSDP())
    with pytest.raises(RuntimeConfigError, match="fp16 is not supported with strategy fsdp"):
        Trainer(train, None, Factories(numerics_task.Probe, numerics_task.data)).fit()


def test_watchdog_is_cancelled_once_stopping_is_done(tmp_path: Path) -> None:
    """A caller that catches TrainingStopped and carries on is not killed by the stop watchdog (it used to
    os._exit(144) this very process sigtermTimeoutSeconds later)."""
    calls = [0]

    def loss_fn() -> Any:
        def loss(output: Any, target: Any) -> Any:
            calls[0] += 1
            if calls[0] == 3:
                os.kill(os.getpid(), signal.SIGTERM)  # as the kubelet would
            return torch.nn.functional.cross_entropy(output, target)
        return loss

    train = Train(model="numerics_task:Probe", dataset="numerics_task:data", batchSize=16)
    trainer = Trainer(train, Checkpoint(dir=str(tmp_path), sigtermTimeoutSeconds=5),
                      Factories(numerics_task.Probe, numerics_task.data, loss=loss_fn), stream=io.StringIO())
    with pytest.raises(TrainingStopped) as stopped:
        trainer.fit()
    assert stopped.value.exit_code == 143 and stopped.value.checkpoint
    time.sleep(6)  # past sigtermTimeoutSeconds: a live watchdog would have ended pytest with 144 by now
    assert not any(thread.name.startswith("Thread") and thread.daemon and thread.is_alive()
                   and isinstance(thread, threading.Timer) for thread in threading.enumerate())


def test_watchdog_is_armed_by_the_signal() -> None:
    stop = StopSignal(DistEnv(0, 1, 0, 1, torch.device("cpu"), "gloo"), timeout_seconds=30, checkpointing=True)
    stop._handle(signal.SIGTERM, None)
    try:
        assert stop._watchdog is not None and stop._watchdog.is_alive()
    finally:
        stop.cancel()
    assert stop._watchdog is None


def test_fp16_on_cpu_warns(capsys: pytest.CaptureFixture[str]) -> None:
    train = Train(model="numerics_task:Probe", dataset="numerics_task:data", batchSize=64, precision="fp16")
    Trainer(train, None, Factories(numerics_task.Probe, numerics_task.data), stream=io.StringIO()).fit()
    assert "warning: precision fp16 on CPU is emulated and several times slower" in capsys.readouterr().err


def test_resume_reports_every_partial_checkpoint_it_removes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".tmp-step-0000000004.pt.123").write_bytes(b"half")
    (tmp_path / ".tmp-step-0000000008").mkdir()  # a sharded write cut off
    train = Train(model="numerics_task:Probe", dataset="numerics_task:data", batchSize=64)
    Trainer(train, Checkpoint(dir=str(tmp_path)), Factories(numerics_task.Probe, numerics_task.data),
            stream=io.StringIO()).fit()
    err = capsys.readouterr().err
    for name in (".tmp-step-0000000004.pt.123", ".tmp-step-0000000008"):
        assert f"removed partial checkpoint {tmp_path / name} (a write that did not finish)" in err
        assert not (tmp_path / name).exists()


def test_launcher_exit_codes() -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def failed(*codes: int) -> ChildFailedError:
        failures = {}
        for rank, exitcode in enumerate(codes):
            failure = ProcessFailure(local_rank=rank, pid=100 + rank, exitcode=exitcode, error_file="<N/A>")
            failure.timestamp = int(time.time()) + rank  # rank 0 failed first
            failures[rank] = failure
        return ChildFailedError("train", failures)

    assert worker_exit_code(-15) == 143 and worker_exit_code(2) == 2
    assert failure_exit_code(failed(143, 143)) == 143  # stopped after the stop checkpoint: retryable
    assert failure_exit_code(failed(-9, 143)) == 137
    assert failure_exit_code(failed(2, 143)) == 2  # the root cause, a configuration error


def test_profiler_writes_traces_and_a_summary(tmp_path: Path) -> None:
    from kubetrain.runtime.settings import Profile

    train = Train(model="numerics_task:Probe", dataset="numerics_task:data", batchSize=16, epochs=2,
                  profile=Profile(dir=str(tmp_path / "prof"), wait=1, warmup=1, active=2, repeat=2))
    stream = io.StringIO()
    Trainer(train, None, Factories(numerics_task.Probe, numerics_task.data), stream=stream).fit()
    profiles = [r for r in map(parse_metrics_line, stream.getvalue().splitlines()) if r and r["kind"] == "profile"]
    assert [r["step"] for r in profiles] == [4, 8]  # (wait 1 + warmup 1 + active 2) x 2 cycles
    assert profiles[0]["top"] and {"op", "self_ms", "self_mem_mb"} <= set(profiles[0]["top"][0])
    traces = sorted((tmp_path / "prof" / "rank-0").glob("*.pt.trace.json"))
    assert len(traces) == 2
    events = json.loads(traces[0].read_text())["traceEvents"]
    assert any(event.get("name") == "aten::addmm" for event in events)  # the Linear layers' matmuls
    summary = Path(profiles[0]["summary"]).read_text()
    assert "Self CPU" in summary and "CPU Mem" in summary


def test_the_gpu_sort_key_is_an_attribute_of_real_profile_averages() -> None:
    """The summary's ranking on a GPU: run on an H200, self_cuda_time_total crashed (FunctionEventAvg lacks it)."""
    import torch

    from kubetrain.runtime.profile import sort_key

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
    averages = prof.key_averages()
    for device in ("cuda", "cpu"):
        key = sort_key(device)
        assert averages and all(isinstance(getattr(event, key), (int, float)) for event in averages), key
        assert averages.table(sort_by=key, row_limit=3)
    assert sort_key("cuda") != sort_key("cpu")


def test_the_launcher_fits_kubetrain_runs_options_to_an_older_torchrun(tmp_path: Path) -> None:
    """torch 2.11's torchrun (an H200's) has no --shutdown-timeout nor --log-line-prefix-template: argparse exit 2
    before any rank started. The launcher drops the first and moves the second to the environment."""
    from torch.distributed.run import get_args_parser

    from kubetrain.jobspec.load import load_spec
    from kubetrain.local.plan import RunOptions, build_plan
    from kubetrain.runtime.launch import _options, for_this_torchrun
    from tests.runtime.helpers import write_spec

    spec = write_spec(tmp_path / "kubetrain.yaml", train={"model": "m:f", "dataset": "m:d"})
    argv = build_plan(load_spec(str(spec)), RunOptions(), environ={"PATH": "/bin"}).nodes[0].argv[3:]
    parser = get_args_parser()
    now = _options(parser)
    assert for_this_torchrun(argv, now) == (argv, {}, [])  # this torch knows every option
    older = {k: v for k, v in now.items() if not k.startswith(("--shutdown", "--log-line-prefix", "--log_line"))}
    fitted, env, dropped = for_this_torchrun(argv, older)
    assert dropped == ["--shutdown-timeout"] and env == {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank-${rank}]:"}
    args = parser.parse_args(fitted)
    assert (args.tee, args.local_addr, args.module, args.training_script) == ("3", "127.0.0.1", True,
                                                                              "kubetrain.runtime")
    assert fitted[-len(args.training_script_args) - 1:] == argv[-len(args.training_script_args) - 1:]
