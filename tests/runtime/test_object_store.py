"""Checkpoints on S3 (a real moto server, tests/testenv/s3.py) with real `kubetrain run` (2 nodes, gloo):
kill -9 and resume bit-identical, a half-written checkpoint (no manifest) ignored and reported, retention;
plus the one-line errors for unsupported URLs and a missing backend."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.runtime.helpers import Run, ft_train, kill_9_after, quiet_env, records, run_sync, write_spec
from tests.runtime.torchmod import require_torch
from tests.testenv.s3 import S3Server

torch = require_torch()
from kubetrain.jobspec.load import parse_spec  # noqa: E402
from kubetrain.runtime.objstore import (  # noqa: E402
    MANIFEST,
    ObjectCheckpointStore,
    open_store,
)

STEP = "step-{:010d}"


def s3_state(fs: Any, url: str, step: int) -> dict[str, Any]:
    data = fs.cat_file(f"{url.removeprefix('s3://')}/{STEP.format(step)}/state.pt")
    return dict(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))


def listing(fs: Any, url: str) -> dict[str, list[str]]:
    """step prefix -> object names below it."""
    fs.invalidate_cache()
    found: dict[str, list[str]] = {}
    for path in fs.find(url.removeprefix("s3://")):
        prefix, name = path.split("/")[-2:]
        found.setdefault(prefix, []).append(name)
    return {prefix: sorted(names) for prefix, names in found.items()}


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_s3_checkpoints_survive_kill_9_bit_identical_with_retention_and_partial_report(
        tmp_path: Path, s3_server: S3Server) -> None:
    bucket, fs = s3_server.bucket("ckpt"), s3_server.filesystem()
    elastic = {"minNodes": 2, "maxNodes": 2, "maxRestarts": 2}
    reference = write_spec(tmp_path / "ref.yaml", train=ft_train(epochs=1),  # no restarts needed
                           checkpoint={"dir": f"{bucket}/ref", "everySteps": 4, "keep": 2})
    spec = write_spec(tmp_path / "job.yaml", train=ft_train(epochs=1),
                      checkpoint={"dir": f"{bucket}/killed", "everySteps": 4, "keep": 2}, elastic=elastic)
    # a checkpoint whose writer died before the manifest: never loaded, reported and removed on start
    fs.pipe_file(f"{bucket.removeprefix('s3://')}/killed/{STEP.format(14)}/state.pt", b"half a checkpoint")
    ref = run_sync(["-f", str(reference)], quiet_env(**s3_server.env()))
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-3000:]

    marker = uuid.uuid4().hex
    run = Run(["-f", str(spec)], quiet_env(TEST_MARKER=marker, FT_SLEEP="0.01", **s3_server.env()))
    code, out, err = kill_9_after(run, marker, lambda r: r["kind"] == "checkpoint" and r["step"] >= 4)
    assert code == 0, out[-4000:] + err[-4000:]
    killed_url = f"{bucket}/killed"
    assert f"removed partial checkpoint {killed_url}/{STEP.format(14)} (a write that did not finish)" in out
    resumes = records(out, "resume")
    assert len(resumes) == 1 and 4 <= resumes[0]["step"] < 16 and resumes[0]["path"].startswith(killed_url)
    # retention: keep 2, every kept checkpoint complete (its objects, then the manifest)
    for url in (f"{bucket}/ref", killed_url):
        assert listing(fs, url) == {STEP.format(n): [MANIFEST, "state.pt"] for n in (12, 16)}
    expected, actual = s3_state(fs, f"{bucket}/ref", 16), s3_state(fs, killed_url, 16)
    assert expected["step"] == actual["step"] == 16
    for key, value in expected["model"].items():
        assert torch.equal(value, actual["model"][key]) if torch.is_tensor(value) else value == actual["model"][key]
    for index, state in expected["optimizer"]["state"].items():
        assert torch.equal(state["momentum_buffer"], actual["optimizer"]["state"][index]["momentum_buffer"])
    manifest = json.loads(fs.cat_file(f"{killed_url.removeprefix('s3://')}/{STEP.format(16)}/{MANIFEST}"))
    assert manifest["objects"]["state.pt"] == fs.size(f"{killed_url.removeprefix('s3://')}/{STEP.format(16)}/state.pt")


@pytest.mark.torch
def test_a_damaged_object_falls_back_to_the_previous_checkpoint(s3_server: S3Server,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    url = f"{s3_server.bucket('damage')}/run"
    store = open_store(url, keep=5)
    assert isinstance(store, ObjectCheckpointStore)
    for step in (1, 2):
        store.save({"step": step, "weights": torch.arange(step * 10)}, step)
    assert [step for step, _ in store.complete()] == [2, 1]
    store.fs.pipe_file(f"{store.root}/{STEP.format(2)}/state.pt", b"truncated")  # the manifest says otherwise
    found = store.load_newest()
    assert found is not None and found[0] == f"{url}/{STEP.format(1)}" and found[1]["step"] == 1


def test_checkpoint_dir_accepts_object_store_urls_and_names_the_field_otherwise() -> None:
    def spec(directory: str) -> str:
        return ("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: x}\n"
                f"spec:\n  image: repo/x:1\n  command: [python, t.py]\n  checkpoint: {{dir: '{directory}'}}\n"
                "  volumes: [{name: ckpt, claim: ckpt, mountPath: /ckpt}]\n")  # a path must be on a volume

    for url in ("s3://bucket/run", "gs://bucket/run", "az://container/run", "/ckpt/run"):
        assert parse_spec(spec(url)).spec.checkpoint.dir == url
    for url, message in (("ftp://host/x", "ftp:// is not a supported store"), ("s3:///x", "names no bucket")):
        with pytest.raises(Exception) as info:
            parse_spec(spec(url))
        assert "spec.checkpoint.dir" in str(info.value) and message in str(info.value), str(info.value)


@pytest.mark.torch
def test_a_missing_backend_is_one_line_naming_the_field() -> None:
    import importlib.util

    from kubetrain.runtime.config import RuntimeConfigError

    if importlib.util.find_spec("adlfs") is not None:
        pytest.skip("adlfs is installed here: no missing backend to report")
    with pytest.raises(RuntimeConfigError) as info:
        open_store("az://container/run", keep=3)
    message = str(info.value)
    assert message.startswith("spec.checkpoint.dir: az:// needs the adlfs package (pip install 'kubetrain[azure]')")
    assert "\n" not in message


def test_the_trainer_starts_on_a_torch_whose_dcp_has_only_the_private_fsspec_module() -> None:
    """torch 2.11 (the H200's) has `torch.distributed.checkpoint._fsspec_filesystem` but not its later public
    name: every Trainer failed to import there, object store or not."""
    # torch 2.11's layout in this torch: the classes under the private name only, the public one gone
    code = ("import sys, torch.distributed.checkpoint as dcp\n"
            "private = sys.modules['torch.distributed.checkpoint._fsspec_filesystem'] = dcp.fsspec_filesystem\n"
            "sys.modules['torch.distributed.checkpoint.fsspec_filesystem'] = None; del dcp.fsspec_filesystem\n"
            "from kubetrain.runtime.trainer import Trainer\n"
            "from kubetrain.runtime.objstore import fsspec_dcp\n"
            "print(fsspec_dcp() is private, fsspec_dcp().FsspecWriter.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "FsspecWriter"]
