"""The CLI tier: click's CliRunner for behaviour, subprocesses where import side effects matter."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kubetrain.cli.main import COMMANDS, cli
from kubetrain.validate.fetch import PINNED
from tests.cli.imports import run_fresh
from tests.testenv import reference
from tests.testenv.fakeapi import FakeApi, files_under

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "tests" / "render" / "specs"
VALIDATE_FIXTURES = REPO / "tests" / "validate" / "manifests"


def all_commands() -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        yield name, command
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                sub_command = command.get_command(ctx, sub)
                assert sub_command is not None
                yield f"{name} {sub}", sub_command


@pytest.mark.parametrize(("name", "command"), list(all_commands()), ids=[n for n, _ in all_commands()])
def test_every_command_has_help_with_an_example(name: str, command: click.Command) -> None:
    result = CliRunner().invoke(cli, [*name.split(), "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output, f"`kubetrain {name} --help` has no example"
    assert f"kubetrain {name.split(maxsplit=1)[0]}" in result.output.split("Example", 1)[1]
    assert command.help and command.help.strip().splitlines()[0].endswith(".")


def test_every_listed_command_exists() -> None:
    assert set(COMMANDS) == {name for name, _ in all_commands() if " " not in name}


@pytest.mark.parametrize("argv", [["--help"], ["render", "-f", str(SPECS / "gke-h100.yaml")],
                                  ["validate", str(VALIDATE_FIXTURES / "simple.yaml"), "--ignore-missing-schemas"]])
def test_light_commands_import_neither_torch_nor_kubernetes(argv: list[str]) -> None:
    result = run_fresh(argv, {"torch", "kubernetes"})
    assert result.exit_code == 0, result.stderr[-2000:]  # the command itself worked
    assert result.loaded == [], result.stderr[-2000:]


def test_render_stdout_is_only_manifests() -> None:
    result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "trainjob-aks.yaml")])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TrainJob"]
    assert result.stderr == ""


def test_render_json_and_out_dir(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "trainjob-aks.yaml"), "-o", "json"])
    listing = json.loads(result.stdout)
    assert listing["kind"] == "List"
    configmap_name = listing["items"][0]["metadata"]["name"]
    out = tmp_path / "deploy"
    result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "trainjob-aks.yaml"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [f"configmap-{configmap_name}.yaml", "trainjob-bert-trainjob.yaml"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*kustomization["resources"], "kustomization.yaml",
                                                            ".kubetrain-render"])
    assert result.stdout.splitlines() == [str(out / name) for name in [*kustomization["resources"],
                                                                       "kustomization.yaml"]]


def test_render_overrides_and_target_checks() -> None:
    result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "elastic-eks.yaml"), "--image", "repo/x:1",
                                      "-n", "team"])
    job = yaml.safe_load(result.stdout)
    assert job["metadata"]["namespace"] == "team"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == "repo/x:1"
    result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "elastic-eks.yaml"), "--target", "trainjob"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "spec.elastic: not supported with target trainjob" in result.stderr


def test_spec_errors_exit_2_one_line_each(tmp_path: Path) -> None:
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text((SPECS / "kind-gpu.yaml").read_text().replace("gpusPerNode: 1", "gpusPerNode: -1\n  xyzzy: 1"))
    result = CliRunner().invoke(cli, ["render", "-f", str(spec)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"error: {spec}:7: spec.gpusPerNode: must be >= 0",
                                          f"error: {spec}:8: spec.xyzzy: unknown field"]


@settings(max_examples=150, deadline=None)
@given(payload=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                         st.sampled_from([b"spec: [", b"apiVersion: 1\nkind: []\nmetadata: 3\nspec: {nodes: x}",
                                          b"\xef\xbb\xbf---\n- !!python/object:os.system ls", b"{{ 1 }}: {%"])))
def test_garbage_never_produces_a_traceback(payload: bytes) -> None:
    result = CliRunner().invoke(cli, ["render", "-f", "-"], input=payload)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert all(line.startswith("error: ") for line in result.stderr.splitlines())


def test_validate_cli_exit_codes_and_json(reference_dir: Path) -> None:
    crd = str(reference_dir / "kubeflow-training-operator-v1.9.4")
    ok = CliRunner().invoke(cli, ["validate", "--schema", crd, str(VALIDATE_FIXTURES / "simple.yaml")])
    assert ok.exit_code == 0
    assert "1 document(s): 0 error(s), 1 warning(s): valid" in ok.stderr
    strict = CliRunner().invoke(cli, ["validate", "--strict", "--schema", crd, str(VALIDATE_FIXTURES / "simple.yaml")])
    assert strict.exit_code == 1
    report = CliRunner().invoke(cli, ["validate", "-o", "json", "--schema", crd, str(VALIDATE_FIXTURES)])
    data = json.loads(report.stdout)
    assert data["documents"] == 6 and data["valid"] is False  # the TrainJob has no schema given here
    assert [i["kind"] for i in data["issues"] if i["severity"] == "error"] == ["TrainJob"]


def test_validate_rendered_output_via_stdin(reference_dir: Path) -> None:
    rendered = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "gke-h100.yaml")]).stdout
    result = CliRunner().invoke(cli, ["validate", "--strict", "--schema",
                                      str(reference_dir / "kubeflow-training-operator-v1.9.4"), "-"], input=rendered)
    assert result.exit_code == 0, result.output


def test_failed_render_piped_into_validate_is_not_green(tmp_path: Path) -> None:
    """The documented CI recipe: `set -o pipefail` makes the render failure fail the step, and even without
    it validate sees zero documents and exits 2."""
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text("apiVersion: nope\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    kt = f'"{sys.executable}" -m kubetrain'
    for pipefail, expected in (("", 2), ("set -o pipefail; ", 2)):
        result = subprocess.run(["bash", "-c", f"{pipefail}{kt} render -f {spec} | {kt} validate --strict -"],
                                capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False)
        assert result.returncode == expected, result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["-n", "Bad NS"], "error: --namespace: 'Bad NS' must consist of lower-case letters"),
    (["--image", "has space:1"], "error: --image: 'has space:1' is not an image reference"),
])
def test_render_overrides_are_validated(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "gke-h100.yaml"), *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message)


def test_full_disk_on_stdout_is_one_line() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "kubetrain", "render", "-f", str(SPECS / "gke-h100.yaml")],
                                stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=env, check=False)
    assert result.returncode == 1
    assert result.stderr == "error: cannot write to stdout: No space left on device\n"


def test_validate_missing_file_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["validate", "nope.yaml"])
    assert result.exit_code == 2
    assert result.stderr == "error: nope.yaml: no such file (create one with `kubetrain init`)\n"


def test_init_writes_a_valid_starter(tmp_path: Path, reference_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "Proj_1")])
    assert result.exit_code == 0
    spec = tmp_path / "Proj_1" / "kubetrain.yaml"
    assert result.stdout == f"{spec}\n"
    assert "name: proj-1" in spec.read_text()
    again = CliRunner().invoke(cli, ["init", str(tmp_path / "Proj_1")])
    assert again.exit_code == 2 and "already exists (use --force to overwrite)" in again.stderr
    rendered = CliRunner().invoke(cli, ["render", "-f", str(spec)]).stdout
    valid = CliRunner().invoke(cli, ["validate", "--strict", "--schema",
                                     str(reference_dir / "kubeflow-training-operator-v1.9.4"), "-"], input=rendered)
    assert valid.exit_code == 0, valid.output


@pytest.fixture()
def upstream_mirror(tmp_path: Path, reference_dir: Path, fake_api: FakeApi) -> tuple[str, Path]:
    """The fake API laid out like the upstream repository, serving the reference CRDs."""
    root = tmp_path / "mirror"
    files = {Path(path).name: path for path in reference.pinned_files(reference_dir)}
    for pinned in PINNED:
        target = root / pinned.ref / pinned.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(files[Path(pinned.path).name], target)
    fake_api.otherwise(files_under(root))
    return fake_api.url, root


def test_schemas_fetch_verifies_and_caches(upstream_mirror: tuple[str, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    base_url, _ = upstream_mirror
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["schemas", "fetch", "--base-url", base_url])
    assert result.exit_code == 0, result.output
    cached = [Path(line) for line in result.stdout.splitlines()]
    assert [p.name for p in cached] == [f"{p.name}.yaml" for p in PINNED]
    assert all(hashlib.sha256(p.read_bytes()).hexdigest() == pin.sha256 for p, pin in zip(cached, PINNED, strict=True))
    listing = CliRunner().invoke(cli, ["schemas", "list"]).stdout
    assert "kubeflow.org/v1\tPyTorchJob\t" in listing and "trainer.kubeflow.org/v1alpha1\tTrainJob\t" in listing
    valid = CliRunner().invoke(cli, ["validate", str(VALIDATE_FIXTURES)])  # schemas now come from the cache
    assert valid.exit_code == 0, valid.output


def test_schemas_fetch_rejects_a_tampered_file(upstream_mirror: tuple[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    base_url, root = upstream_mirror
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    tampered = root / PINNED[0].ref / PINNED[0].path
    tampered.write_text(tampered.read_text() + "\n# extra\n")
    result = CliRunner().invoke(cli, ["schemas", "fetch", "--base-url", base_url])
    assert result.exit_code == 2
    assert "does not match the pinned" in result.stderr and "refusing to cache it" in result.stderr
    assert not (tmp_path / "cache" / "schemas" / PINNED[0].filename).exists()


def test_schemas_fetch_unreachable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(cli, ["schemas", "fetch", "--base-url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot download http://127.0.0.1:9/v1.9.4/")


@pytest.mark.parametrize("width", [80, 100, 200])
def test_fast_help_is_exactly_clicks_help(width: int) -> None:
    from kubetrain.cli.commands import fast_help

    result = CliRunner().invoke(cli, ["--help"], terminal_width=width, prog_name="kubetrain")
    assert result.exit_code == 0
    assert fast_help() == result.output


def test_entry_point_fast_paths_skip_click() -> None:
    code = ("import sys; from kubetrain.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('CLICK=' + str('click' in sys.modules), file=sys.stderr)")
    for flag, expected in (("--help", "Commands:"), ("--version", "kubetrain, version ")):
        result = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, timeout=60,
                                env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"}, check=True)
        assert expected in result.stdout
        assert "CLICK=False" in result.stderr
    narrow = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True, timeout=60,
                            env={"COLUMNS": "60", "PATH": "/usr/bin:/bin"}, check=True)
    assert "CLICK=True" in narrow.stderr  # narrow terminals get click's own wrapping


def test_render_warnings_helper_drops_the_cloud_warning_once_resolved(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kubetrain.cli.common import load, warn_render

    spec = tmp_path / "kubetrain.yaml"
    spec.write_text("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: w}\n"
                    "spec:\n  image: repo/x:1\n  command: [torchrun, --nnodes=3, train.py]\n"
                    "  placement: {cloud: auto}\n")
    warn_render(load(str(spec)))
    err = capsys.readouterr().err
    assert "--nnodes=3" in err and "spec.placement.cloud: auto" in err
    warn_render(load(str(spec)), cloud="gke")  # what submit passes once it resolved the cloud
    err = capsys.readouterr().err
    assert "--nnodes=3" in err and "placement.cloud" not in err


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only tmpfs needs root")
def test_render_out_into_a_read_only_filesystem_is_one_line(tmp_path: Path) -> None:
    target = tmp_path / "ro"
    target.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(target)], check=True)
    try:  # EROFS on the write, and on the temp file's clean-up
        result = CliRunner().invoke(cli, ["render", "-f", str(SPECS / "trainjob-aks.yaml"), "--out", str(target)])
        assert result.exit_code != 0 and (result.exception is None or isinstance(result.exception, SystemExit))
        assert "Traceback" not in result.output
        assert "Read-only file system" in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert list(target.iterdir()) == []
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.mark.parametrize("argv", [["render", "-f", str(SPECS / "gke-h100.yaml")], ["render", "-f", "/no/such.yaml"]])
def test_the_console_entry_tunes_the_gc_and_keeps_output_and_code(argv: list[str]) -> None:
    """kubetrain.cli.entry: the cyclic GC runs less often (tune_gc) and the objects alive at exit are frozen
    (exit_without_rescans), whatever the exit code; what the command wrote and its exit code are unchanged."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: sys.stderr.write(f'{gc.get_threshold()} frozen={gc.get_freeze_count()}\\n'))\n"
            "from kubetrain.cli.entry import main\n"
            "sys.argv = ['kubetrain', *sys.argv[1:]]\n"
            "sys.exit(main())\n")
    fresh = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                           check=False)
    direct = CliRunner().invoke(cli, argv)
    assert fresh.returncode == direct.exit_code and fresh.stdout == direct.stdout
    assert int(fresh.stderr.rsplit("frozen=", 1)[1]) > 1000, fresh.stderr
    assert "(200000, 30, 30) frozen=" in fresh.stderr


def test_validate_takes_kubectls_filename_flag(reference_dir: Path) -> None:
    """`-f` as kubectl's (repeatable, a file, a directory or -), beside the positional paths."""
    crd = str(reference_dir / "kubeflow-training-operator-v1.9.4")
    simple = str(VALIDATE_FIXTURES / "simple.yaml")
    one = CliRunner().invoke(cli, ["validate", "--schema", crd, "-f", simple])
    assert one.exit_code == 0 and "1 document(s): 0 error(s), 1 warning(s): valid" in one.stderr, one.output
    both = CliRunner().invoke(cli, ["validate", "-o", "json", "--schema", crd, "-f", simple, "--filename", "-", simple],
                              input=Path(simple).read_text())
    assert json.loads(both.stdout)["documents"] == 3, both.output
    missing = CliRunner().invoke(cli, ["validate", "-f", "nope.yaml"])
    assert missing.exit_code == 2 and missing.stderr.startswith("error: nope.yaml: no such file"), missing.output
