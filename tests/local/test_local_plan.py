"""`kubetrain run` planning (torch-free): env files, path mapping, secrets, the torchrun commands."""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kubetrain.checks import FAIL, WARN, Check
from kubetrain.errors import UsageError
from kubetrain.jobspec.load import load_spec
from kubetrain.local.envfile import parse_env_text
from kubetrain.local.paths import PathMap
from kubetrain.local.plan import RunOptions, build_plan
from kubetrain.local.preflight import gpu_check, gpu_count_check
from kubetrain.local.supervisor import format_line
from kubetrain.podenv import RUN_ID_ENV, STORE_HOST_ENV
from tests.runtime.helpers import EXAMPLE, REPO, write_spec


def test_env_file_syntax() -> None:
    text = """
# comment
export A=1
B = two words  # trailing comment
C='single # kept'
D="line\\nbreak \\"quoted\\""
E=
"""
    assert parse_env_text(text, ".env") == {"A": "1", "B": "two words", "C": "single # kept",
                                            "D": 'line\nbreak "quoted"', "E": ""}


def test_env_file_error_names_line_but_not_value() -> None:
    with pytest.raises(UsageError) as info:
        parse_env_text("OK=1\nTOKEN 's3cret'\n", "secrets.env")
    assert str(info.value) == "secrets.env:2: expected KEY=VALUE (value not shown)"
    assert "s3cret" not in str(info.value)


def test_path_map_rewrites_path_prefixes_only() -> None:
    paths = PathMap((("/ckpt", "/home/me/ckpt"), ("/ckpt/big", "/mnt/big"), ("/workspace", "/src")))
    assert paths.rewrite("/ckpt") == "/home/me/ckpt"
    assert paths.rewrite("/ckpt/run1/model.pt") == "/home/me/ckpt/run1/model.pt"
    assert paths.rewrite("/ckpt/big/x") == "/mnt/big/x"  # the longest mount wins
    assert paths.rewrite("--out=/ckpt/x") == "--out=/home/me/ckpt/x"
    assert paths.rewrite("/a:/workspace/lib") == "/a:/src/lib"
    assert paths.rewrite('{"dir":"/ckpt/d"}') == '{"dir":"/home/me/ckpt/d"}'
    for untouched in ("/ckpts/x", "/data/ckpt", "s3://bucket/ckpt", "x/ckpt"):
        assert paths.rewrite(untouched) == untouched


def _plan(tmp_path: Path, environ: dict[str, str] | None = None, **kwargs: object):
    spec = write_spec(tmp_path / "kubetrain.yaml", train={"model": "m:f", "dataset": "m:d"},
                      checkpoint={"dir": "/ckpt/run"}, elastic=kwargs.pop("elastic", None))
    text = spec.read_text()
    extra = kwargs.pop("extra", "")
    spec.write_text(text + extra)
    return build_plan(load_spec(str(spec)), RunOptions(**kwargs), environ=environ or {"PATH": "/bin"},
                      cwd=tmp_path)


def test_plan_runs_the_manifests_program_through_one_agent_per_node(tmp_path: Path) -> None:
    plan = _plan(tmp_path, environ={"PATH": "/bin", "RANK": "5", "PET_NNODES": "9", "MASTER_ADDR": "x"})
    assert [node.index for node in plan.nodes] == [1, 2]
    argv = plan.nodes[0].argv
    assert argv[1:3] == ["-m", "kubetrain.runtime.launch"] and argv[-2:] == ["-m", "kubetrain.runtime"]
    value = dict(itertools.pairwise(argv))
    assert value["--nnodes"] == "2" and value["--nproc-per-node"] == "1" and value["--rdzv-backend"] == "c10d"
    assert value["--max-restarts"] == "0" and value["--rdzv-endpoint"].startswith("127.0.0.1:")
    # every agent is a client of the store that node 1's launcher serves on the endpoint's port
    assert all("is_host=0" in dict(itertools.pairwise(node.argv))["--rdzv-conf"] for node in plan.nodes)
    assert [node.env.get(STORE_HOST_ENV) for node in plan.nodes] == ["1", None]
    env = plan.nodes[0].env
    assert env[RUN_ID_ENV] == plan.run_id and env["PATH"] == "/bin"
    assert "RANK" not in env and "PET_NNODES" not in env and "MASTER_ADDR" not in env  # launcher leftovers
    config = json.loads(env["KUBETRAIN_CONFIG"])
    assert config["checkpoint"]["dir"] == str(tmp_path / "ckpt" / "run")  # /ckpt mapped to the volume
    assert json.loads(env["KUBETRAIN_PATH_MAP"])["/ckpt"] == str(tmp_path / "ckpt")
    assert env["PYTHONPATH"].split(":")[0] == plan.path_map.rewrite("/workspace")


def test_plan_honours_elastic_settings(tmp_path: Path) -> None:
    plan = _plan(tmp_path, elastic={"minNodes": 1, "maxNodes": 3, "maxRestarts": 4})
    value = dict(itertools.pairwise(plan.nodes[0].argv))
    assert value["--nnodes"] == "1:3" and value["--max-restarts"] == "4" and plan.elastic
    with pytest.raises(UsageError, match=r"between elastic\.minNodes"):
        _plan(tmp_path, elastic={"minNodes": 1, "maxNodes": 3}, nodes=4)


def test_secrets_come_from_env_file_then_environment_and_are_redacted(tmp_path: Path) -> None:
    extra = ("  secretEnv:\n  - {name: HF_TOKEN, secret: hf, key: token}\n"
             "  - {name: WANDB_KEY, secret: wandb, key: key}\n  - {name: OPT, secret: o, key: k, optional: true}\n")
    plan = _plan(tmp_path, environ={"WANDB_KEY": "from-env"}, extra=extra,
                 env_file_values={"HF_TOKEN": "hf_s3cret"})
    env = plan.nodes[0].env
    assert env["HF_TOKEN"] == "hf_s3cret" and env["WANDB_KEY"] == "from-env" and "OPT" not in env
    described = "\n".join(plan.describe())
    assert "hf_s3cret" not in described and "from-env" not in described and "<redacted>" in described
    with pytest.raises(UsageError, match=r"spec\.secretEnv\[1\]: WANDB_KEY .* is not set"):
        _plan(tmp_path, environ={}, extra=extra, env_file_values={"HF_TOKEN": "x"})


def test_volume_override_and_unknown_volume(tmp_path: Path) -> None:
    plan = _plan(tmp_path, volumes=["ckpt=elsewhere"])
    assert dict(plan.path_map.mounts)["/ckpt"] == str(tmp_path / "elsewhere")
    assert (tmp_path / "elsewhere").is_dir()
    with pytest.raises(UsageError, match="no volume named 'data'"):
        _plan(tmp_path, volumes=["data=elsewhere"])


def test_gpu_nodes_get_disjoint_devices(tmp_path: Path) -> None:
    plan = _plan(tmp_path, extra="  gpusPerNode: 2\n")
    assert [node.env["CUDA_VISIBLE_DEVICES"] for node in plan.nodes] == ["0,1", "2,3"]


def test_log_lines_get_node_and_rank_prefixes() -> None:
    assert format_line(2, "[rank-3]:loss 0.1") == "[node-2 rank-3] loss 0.1"
    assert format_line(1, "W1121 agent warning") == "[node-1] W1121 agent warning"


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubetrain", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)


def test_a_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    """Agents that met another program on --port waited for their rendezvous for 10 minutes."""
    spec = write_spec(tmp_path / "job.yaml", command=["python", "sleeper.py"])  # a job that would start
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _cli("run", "-f", str(spec), "--port", str(port))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"error: --port {port}: 127.0.0.1:{port} is in use (")
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_run_help_has_examples() -> None:
    result = _cli("run", "--help")
    assert result.returncode == 0 and "Examples:" in result.stdout and "kubetrain run -f" in result.stdout


def test_dry_run_prints_commands_without_secrets(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "job.yaml", train={"model": "m:f", "dataset": "m:d"})
    spec.write_text(spec.read_text() + "  secretEnv:\n  - {name: API_KEY, secret: api, key: k}\n")
    (tmp_path / ".env").write_text("API_KEY=topsecret-value\n")
    result = _cli("run", "-f", str(spec), "--env-file", str(tmp_path / ".env"), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "kubetrain.runtime.launch" in result.stdout and "# node-2" in result.stdout
    assert "topsecret-value" not in result.stdout + result.stderr
    # node 1's agent serves the rendezvous store: only its line says so
    agents = [line for line in result.stdout.splitlines() if "kubetrain.runtime.launch" in line]
    assert [f"{STORE_HOST_ENV}=1 " in line for line in agents] == [True, False], agents
    assert f"export {STORE_HOST_ENV}" not in result.stdout


def test_cli_paths_that_must_stay_light_do_not_import_torch() -> None:
    code = ("import sys\nfrom kubetrain.cli.main import main\n"
            "for argv in (['--help'], ['run', '--help'], ['render', '-f', sys.argv[1]]):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "import kubetrain.metrics, kubetrain.local\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    result = subprocess.run([sys.executable, "-c", code, str(EXAMPLE / "kubetrain.yaml")], capture_output=True,
                            text=True, cwd=REPO, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_run_prints_the_render_warnings_on_stderr(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "job.yaml", command=["torchrun", "--nproc-per-node=4", "train.py"])
    result = _cli("run", "-f", str(spec), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "spec.command: --nproc-per-node=4 overrides the spec's 1 process(es) per pod" in result.stderr
    assert "overrides" not in result.stdout


def test_a_checkpoint_dir_the_pod_would_lose_is_refused_before_the_run(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "job.yaml", command=["python", "train.py"], checkpoint={"dir": "ckpt"})
    result = _cli("run", "-f", str(spec), "--dry-run")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"error: {spec}:7: spec.checkpoint.dir: 'ckpt' is relative: in the pod it is under the "
                             "working directory, the read-only code mount /workspace; use an absolute path on a "
                             "volume (e.g. /ckpt/run) or an object store URL\n")
    assert "spec.checkpoint.dir" not in _cli("run", "-f", str(write_spec(
        tmp_path / "abs.yaml", command=["python", "train.py"], checkpoint={"dir": "/ckpt/run"})), "--dry-run").stderr


def test_an_ephemeral_checkpoint_dir_is_a_fresh_directory_of_each_run_as_in_a_new_pod(tmp_path: Path) -> None:
    """In the pod a checkpoint.dir on no volume is in the container's own layer: gone with the pod, so a new
    pod starts over. Locally it is a directory of this run, never the host's /scratch, never resumed from."""
    spec = write_spec(tmp_path / "kubetrain.yaml", train={"model": "m:f", "dataset": "m:d"},
                      checkpoint={"dir": "/scratch/run", "ephemeral": True})
    first, second = (build_plan(load_spec(str(spec)), RunOptions(), environ={"PATH": "/bin"}, cwd=tmp_path)
                     for _ in range(2))
    dirs = [json.loads(plan.nodes[0].env["KUBETRAIN_CONFIG"])["checkpoint"]["dir"] for plan in (first, second)]
    assert dirs == [str(tmp_path / ".kubetrain" / "scratch" / plan.run_id) for plan in (first, second)]
    assert dirs[0] != dirs[1] and Path(dirs[0]).is_dir()
    assert not Path("/scratch/run").exists()


def test_dry_run_creates_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    spec = write_spec(project / "kubetrain.yaml", train={"model": "m:f", "dataset": "m:d"},
                      checkpoint={"dir": "/ckpt/run"}, code=project)
    spec.write_text(spec.read_text().replace(str(project / "ckpt"), "volumes/ckpt"))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = _cli("run", "-f", str(spec), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert str(project / "volumes" / "ckpt") in result.stdout  # the mapping is described...
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # ...and nothing is created


def test_more_processes_than_cpu_cores_are_a_warning(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "job.yaml", command=["python", "train.py"])
    cores = len(os.sched_getaffinity(0))
    result = _cli("run", "-f", str(spec), "--dry-run", "--procs-per-node", str(cores + 1))
    assert result.returncode == 0, result.stderr
    assert (f"warning: 2 node(s) x {cores + 1} process(es) = {2 * cores + 2} training processes on {cores} CPU "
            f"core(s): they share the cores and run slower than fewer would; lower --procs-per-node or --nodes "
            "(spec.procsPerNode, spec.nodes)\n") in result.stderr
    fits = _cli("run", "-f", str(spec), "--dry-run", "--nodes", "1", "--procs-per-node", "1")
    assert "CPU core" not in fits.stderr


def test_gpus_requested_on_a_machine_without_any_are_a_warning(tmp_path: Path) -> None:
    assert gpu_check(1, dev=tmp_path) == Check("gpus", WARN, (
        f"spec.gpusPerNode: 1 GPU(s) per node requested, but this machine has no NVIDIA GPU ({tmp_path}/nvidia* "
        "absent): the local run uses the CPU; each pod in the cluster gets its GPUs"))
    assert gpu_check(0, dev=tmp_path) is None
    (tmp_path / "nvidia0").touch()
    assert gpu_check(1, dev=tmp_path) is None


def test_a_restart_moves_every_agent_to_the_same_new_port(tmp_path: Path) -> None:
    """spec.hang's restart: node 1's launcher serves the store on its endpoint, so all must move together."""
    from kubetrain.local.hangwatch import with_fresh_endpoint

    before = _plan(tmp_path)
    plan = with_fresh_endpoint(before)
    endpoints = {dict(itertools.pairwise(node.argv))["--rdzv-endpoint"] for node in plan.nodes}
    assert len(endpoints) == 1 and endpoints != {dict(itertools.pairwise(before.nodes[0].argv))["--rdzv-endpoint"]}
    assert plan.nodes[0].env[STORE_HOST_ENV] == "1"


def test_a_cpu_job_sees_no_gpu_as_its_pods_do(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert [node.env["CUDA_VISIBLE_DEVICES"] for node in plan.nodes] == ["", ""]
    mine = _plan(tmp_path, environ={**os.environ, "CUDA_VISIBLE_DEVICES": "1"})
    assert [node.env["CUDA_VISIBLE_DEVICES"] for node in mine.nodes] == ["1", "1"]


def test_more_gpus_than_the_machine_has_are_refused_before_starting(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        (dev / name).touch()
    plan = _plan(tmp_path, extra="  gpusPerNode: 1\n")
    refused = gpu_count_check(plan, 1, dev=dev, environ={})
    assert refused is not None and refused.status == FAIL
    assert re.match(r"^spec\.gpusPerNode: 2 node\(s\) x 1 GPU\(s\) need 2 GPUs on this machine, which has 1 "
                    r"\(.*/dev/nvidia\*\): run with --nodes 1", refused.message), refused.message
    assert gpu_count_check(plan, 1, dev=dev, environ={"CUDA_VISIBLE_DEVICES": "0,0"}) is None  # the user's choice
    assert gpu_count_check(plan, 1, dev=tmp_path / "none", environ={}) is None  # no GPU at all: gpu_check's case
    (dev / "nvidia1").touch()
    assert gpu_count_check(plan, 1, dev=dev, environ={}) is None
