"""Launchers already in the command, command-line overrides, and objects too large for the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubetrain.errors import RenderError, SecretRefused, SpecError
from kubetrain.render import RenderOptions, render_job
from kubetrain.render.code import collect_code
from kubetrain.render.launch import container_command, launcher_warnings
from kubetrain.rules.command import parse_command
from tests.render.test_rules import job, pod, pytorchjob


def container(obj: dict[str, object]) -> dict[str, object]:
    return pod(obj)["containers"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("command", [
    ["torchrun", "--nproc-per-node=8", "train.py", "--lr", "0.1"],
    ["/usr/bin/torchrun", "--nproc-per-node=8", "train.py", "--lr", "0.1"],
    ["python", "-m", "torch.distributed.run", "--nproc-per-node=8", "train.py", "--lr", "0.1"],
])
def test_a_torchrun_command_is_passed_through_not_wrapped(command: list[str]) -> None:
    obj = pytorchjob(command=command, gpusPerNode=8, args=["--epochs", "2"])
    assert container(obj)["command"] == container_command()
    assert container(obj)["args"] == ["--nproc-per-node=8", "train.py", "--lr", "0.1", "--epochs", "2"]


def test_torchrun_flags_that_contradict_the_spec_are_warned_about() -> None:
    spec = job(command=["torchrun", "--nproc_per_node", "4", "--nnodes=3", "--node-rank=0", "--standalone",
                        "train.py"], gpusPerNode=8, nodes=2).spec
    assert launcher_warnings(spec) == [
        "spec.command: --nproc-per-node=4 overrides the spec's 8 process(es) per pod (procsPerNode/gpusPerNode)",
        "spec.command: --nnodes=3 contradicts the spec (2)",
        "spec.command: --node-rank is fixed in the command; the operator sets it per pod (PET_* variables): "
        "remove it",
        "spec.command: --standalone in a multi-node job: each pod starts its own single-node rendezvous and waits "
        "for nodes that never join; remove it",
    ]
    assert launcher_warnings(job(command=["torchrun", "--nproc-per-node=8", "t.py"], gpusPerNode=8).spec) == []
    assert launcher_warnings(job(command=["python", "t.py"]).spec) == []


@pytest.mark.parametrize(("command", "message"), [
    (["accelerate", "launch", "--multi_gpu", "train.py"], "`accelerate launch` starts its own launcher"),
    (["python", "-m", "accelerate.commands.launch", "train.py"], "`accelerate launch` starts its own launcher"),
    (["deepspeed", "--num_gpus=8", "train.py"], "the deepspeed launcher reaches the other nodes over ssh/pdsh"),
    (["python", "-m", "torch.distributed.launch", "train.py"], "torch.distributed.launch is deprecated"),
])
def test_other_launchers_are_refused_with_what_to_do(command: list[str], message: str) -> None:
    with pytest.raises(SpecError) as info:
        pytorchjob(command=command)
    assert info.value.lines()[0].startswith(f"spec.command: {message}")
    assert "[python, train.py]" in info.value.lines()[0]


@pytest.mark.parametrize(("options", "message"), [
    (RenderOptions(namespace="Bad NS"), "--namespace: 'Bad NS' must consist of lower-case letters"),
    (RenderOptions(image="has space:1"), "--image: 'has space:1' is not an image reference"),
])
def test_overrides_are_checked_like_the_fields_they_replace(options: RenderOptions, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        render_job(job(), options)


def test_a_50_mib_argument_is_refused_before_rendering() -> None:
    with pytest.raises(RenderError, match=r"the spec's values alone are 50.\d\d MiB; etcd stores at most 1.5 MiB"):
        pytorchjob(args=["x" * 50 * 2**20])


def test_an_object_over_etcds_limit_is_refused_after_rendering() -> None:
    # 0.9 MiB of arguments fit the spec, but Master and Worker each repeat them.
    with pytest.raises(RenderError, match=r"PyTorchJob/j: the object is 1.7\d MiB as JSON; etcd stores at most"):
        pytorchjob(nodes=2, args=["x" * (900 * 2**10)])


def test_code_over_one_mib_names_the_cause(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\0" * (2**20 + 1))
    with pytest.raises(RenderError, match=r"spec\.code\.path"):
        collect_code(tmp_path)


def test_secrets_are_refused_and_ignored_files_stay_out_of_the_code_configmap(tmp_path: Path) -> None:
    files = {"train.py": "x", ".env": "TOKEN=1", ".env.prod": "T=2", "keys/server.key": "k", "certs/ca.crt": "c",
             "id_rsa": "k", "data/big.csv": "1,2", "notes.md": "n", "build/out.o": "o", ".gitignore": "data/\n",
             ".dockerignore": "build\n"}
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    with pytest.raises(SecretRefused) as info:
        collect_code(tmp_path)
    assert [line.split(":")[0] for line in info.value.lines()] == [
        f"{tmp_path}/{name}" for name in (".env", ".env.prod", "id_rsa", "keys/server.key")]
    (tmp_path / ".kubetrainignore").write_text(".env*\nkeys\nid_rsa\n")
    shipped = [path for path, _ in collect_code(tmp_path).files]
    assert shipped == [".dockerignore", ".gitignore", "certs/ca.crt", "notes.md", "train.py"]  # a certificate is public
    shipped = [path for path, _ in collect_code(tmp_path, include=["data/*", ".env"]).files]
    assert shipped == [".dockerignore", ".env", ".gitignore", "certs/ca.crt", "data/big.csv", "notes.md", "train.py"]


def test_code_path_outside_the_project_renders_without_a_traceback(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kubetrain.cli.main import cli

    outside = tmp_path / "elsewhere"
    (outside).mkdir()
    (outside / "train.py").write_text("print(1)\n")
    project = tmp_path / "project"
    project.mkdir()
    spec = project / "kubetrain.yaml"
    spec.write_text("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\nspec:\n"
                    "  image: repo/img:1\n  command: [python, train.py]\n  code: {path: ../elsewhere}\n")
    result = CliRunner().invoke(cli, ["render", "-f", str(spec)])
    assert result.exit_code == 0, result.output
    assert "train.py" in result.stdout
    spec.write_text(spec.read_text().replace("../elsewhere", "../missing"))
    result = CliRunner().invoke(cli, ["render", "-f", str(spec)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: spec.code.path: ") and "is not a directory" in result.stderr


def test_gpu_type_is_checked_against_the_profile_with_did_you_mean() -> None:
    with pytest.raises(SpecError, match=r"'nvidia-h100' is not a cloud.google.com/gke-accelerator value of the gke "
                                        r"profile; did you mean 'nvidia-h100-80gb'\?"):
        job(gpusPerNode=8, placement={"cloud": "gke", "gpuType": "nvidia-h100"})
    with pytest.raises(SpecError, match=r"did you mean 'h100'\?"):
        job(gpusPerNode=8, placement={"cloud": "eks", "gpuType": "H100"})
    assert job(gpusPerNode=8, placement={"cloud": "generic", "gpuType": "NVIDIA-H100-80GB-HBM3"})


def test_read_only_root_gets_a_writable_tmp() -> None:
    obj = pytorchjob(security={"readOnlyRootFilesystem": True})
    assert {"name": "tmp", "emptyDir": {}} in pod(obj)["volumes"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container(obj)["volumeMounts"]  # type: ignore[operator]
    assert {"name": "TMPDIR", "value": "/tmp"} in container(obj)["env"]  # type: ignore[operator]
    assert all(v["name"] != "tmp" for v in pod(pytorchjob())["volumes"])


def test_trainjob_maps_or_refuses_run_policy_and_selects_runtime_and_suspends_for_kueue() -> None:
    with pytest.raises(SpecError, match=r"spec.runPolicy.backoffLimit: not supported with target trainjob"):
        job(target="trainjob", runPolicy={"backoffLimit": 5, "activeDeadlineSeconds": 60})
    obj = render_job(job(target="trainjob", runPolicy={"activeDeadlineSeconds": 60}, trainingRuntime="torch-fsdp",
                         scheduling={"queue": "team-a"}))[-1]
    assert obj["spec"]["activeDeadlineSeconds"] == 60
    assert obj["spec"]["runtimeRef"]["name"] == "torch-fsdp"
    assert obj["spec"]["suspend"] is True
    assert "suspend" not in render_job(job(target="trainjob"))[-1]["spec"]


def test_cloud_auto_warns_at_render_time() -> None:
    from kubetrain.render import render_warnings

    assert render_warnings(job(placement={"cloud": "auto"}))[0].startswith("spec.placement.cloud: auto is resolved")
    assert render_warnings(job(placement={"cloud": "auto"}), RenderOptions(cloud="gke")) == []


def test_rdma_fabrics_get_devices_ipc_lock_and_nccl_settings() -> None:
    obj = pytorchjob(nodes=2, gpusPerNode=8, network={"fabric": "efa", "devices": 32})
    resources = container(obj)["resources"]
    assert resources["requests"]["vpc.amazonaws.com/efa"] == resources["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert container(obj)["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert {"name": "FI_PROVIDER", "value": "efa"} in container(obj)["env"]  # type: ignore[operator]
    obj = pytorchjob(gpusPerNode=8, network={"fabric": "infiniband", "resource": "rdma/rdma_shared_device_a"})
    assert container(obj)["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
    assert {"name": "NCCL_IB_DISABLE", "value": "0"} in container(obj)["env"]  # type: ignore[operator]
    assert "add" not in container(pytorchjob())["securityContext"]["capabilities"]


def test_guaranteed_qos_sets_requests_equal_to_limits() -> None:
    obj = pytorchjob(resources={"cpu": "16", "memory": "64Gi", "guaranteed": True}, shmSize="8Gi")
    resources = container(obj)["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == "16"
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "72Gi"
    with pytest.raises(SpecError, match=r"spec.resources.guaranteed: needs resources.cpu and resources.memory"):
        job(resources={"cpu": "16", "guaranteed": True})


@pytest.mark.parametrize("target", ["pytorchjob", "trainjob"])
def test_spec_archive_runs_the_pod_command_under_the_archive_wrapper(target: str) -> None:
    rendered = render_job(job(archive="s3://runs/team-a", nodes=2), target=target)[-1]
    spec = (pod(rendered) if target == "pytorchjob"
            else rendered["spec"]["podTemplateOverrides"][0]["spec"] if "podTemplateOverrides" in rendered["spec"]
            else rendered["spec"]["trainer"])
    command = spec["containers"][0]["command"] if "containers" in spec else spec["command"]
    assert command == ["python", "-m", "kubetrain.observe.archive", "--url", "s3://runs/team-a", "--job", "j", "--",
                       *container_command()]
    plain = render_job(job(nodes=2), target=target)[-1]
    assert "kubetrain.observe.archive" not in str(plain)


@pytest.mark.parametrize(("command", "kind", "target", "nproc"), [
    (["torchrun", "--nproc_per_node=2", "train.py", "--lr", "1"], "script", "train.py", "2"),
    (["torchrun", "--nproc-per-node", "2", "--standalone", "-m", "pkg.mod"], "module", "pkg.mod", "2"),
    (["python3", "-m", "torch.distributed.run", "--no_python", "bash", "x.sh"], "executable", "bash", None),
    (["python", "-m", "pkg"], "module", "pkg", None),
    (["python", "train.py"], "script", "train.py", None),
    (["bash", "run.sh"], "executable", "bash", None),
    (None, "trainer", "kubetrain.runtime", None),
])
def test_one_parser_reads_every_command_shape(command: list[str] | None, kind: str, target: str,
                                              nproc: str | None) -> None:
    parsed = parse_command(command, ["--extra"])
    assert (parsed.kind, parsed.target, parsed.flag("--nproc-per-node")) == (kind, target, nproc)
    assert parsed.args[-1] == "--extra"


def test_code_sizes_are_checked_from_metadata_before_any_file_is_read(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.py").write_text("x")
    (tmp_path / "data").mkdir()
    with (tmp_path / "data" / "big.bin").open("wb") as handle:
        handle.truncate(2 * 2**30)  # 2 GiB, sparse: reading it would take seconds and gigabytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"read {self} before checking sizes"))
    with pytest.raises(RenderError) as info:
        collect_code(tmp_path)
    assert str(info.value) == (
        f"spec.code.path: {tmp_path} holds 2048.00 MiB but a ConfigMap holds at most 1 MiB (largest: data/big.bin "
        "(2097152 KiB), train.py (0 KiB); most in: data/ (2097152 KiB)); exclude them in .kubetrainignore (one glob "
        "per line) or code.exclude, or bake the code into the image with `kubetrain build`")


def test_too_many_files_are_refused_naming_where_they_are(tmp_path: Path) -> None:
    (tmp_path / "samples").mkdir()
    for index in range(2001):
        (tmp_path / "samples" / f"{index}.txt").write_text("1")
    with pytest.raises(RenderError, match=r"holds more than 2000 files to ship \(most in: samples/ \(2001 "
                                          r"files\)\); exclude them in \.kubetrainignore"):
        collect_code(tmp_path)
    (tmp_path / ".kubetrainignore").write_text("samples\n")
    assert collect_code(tmp_path).files == ()


def test_heavy_directories_and_kubetrain_specs_are_not_code(tmp_path: Path) -> None:
    spec = "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\n"
    files = {"train.py": "x", "config.yaml": "lr: 0.1\n", "kubetrain.yaml": spec, "jobs/other.yaml": spec,
             "checkpoints/step-1.pt": "c", "venv/bin/python": "p", ".venv/lib/x.py": "v", "wandb/run/log": "w",
             "pkg.egg-info/PKG-INFO": "i"}
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    bundle = collect_code(tmp_path)
    assert [path for path, _ in bundle.files] == ["config.yaml", "train.py"]
    (tmp_path / "jobs" / "other.yaml").write_text(spec + "metadata: {name: edited}\n")
    assert collect_code(tmp_path).digest == bundle.digest  # editing another job's spec changes no code hash
    assert [path for path, _ in collect_code(tmp_path, include=["kubetrain.yaml"]).files] == [
        "config.yaml", "kubetrain.yaml", "train.py"]


@pytest.mark.parametrize("target", ["file", "directory"])
def test_a_symlink_out_of_the_code_directory_is_named(tmp_path: Path, target: str) -> None:
    outside, code = tmp_path / "shared", tmp_path / "code"
    code.mkdir()
    outside.mkdir()
    (outside / "utils.py").write_text("x")
    (code / "train.py").write_text("x")
    (code / "utils").symlink_to(outside / "utils.py" if target == "file" else outside)
    with pytest.raises(RenderError) as info:
        collect_code(code)
    assert str(info.value).startswith(f"spec.code.path: utils is a symlink to {outside}")
    assert str(info.value).endswith("the pod's code would not have it; copy it in, or exclude it in .kubetrainignore")
    (code / ".kubetrainignore").write_text("utils\n")
    assert [path for path, _ in collect_code(code).files] == ["train.py"]
