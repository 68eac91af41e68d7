"""One rule for what leaves the machine: the image build context and the code ConfigMap select the same files
(kubetrain's defaults, .gitignore, .dockerignore, .kubetrainignore), and a file that looks like a secret is
refused by name unless it is shipped on purpose. The real builders' layers: tests/imagebuild/test_secret_layers.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kubetrain.cli.main import cli
from kubetrain.errors import SecretRefused
from kubetrain.imagebuild.plan import assemble, plan_build
from kubetrain.imagebuild.selection import select
from kubetrain.jobspec.load import load_spec
from kubetrain.render.code import collect_code

# Built from parts, so that this file itself holds no private key header for a scanner to find.
KEY_HEADER = "-----BEGIN " + "OPENSSH PRIVATE KEY-----"
PKCS8_HEADER = "-----BEGIN " + "PRIVATE KEY-----"  # as in a service-account key's JSON
AWS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"  # 40 characters of AWS's alphabet (its docs' example)
SECRET = "s3cr3t-do-not-ship"  # in every secret file: found anywhere it must not be, it leaked
SECRETS = {".env": f"TOKEN={SECRET}\n", ".env.local": f"TOKEN={SECRET}\n", "id_rsa": f"{KEY_HEADER}\n{SECRET}\n",
           "server.key": f"{SECRET}\n", "deploy/ops.txt": f"{KEY_HEADER}\n{SECRET}\n",
           "gcp.json": '{"type": "service_account", "private_key": "' + PKCS8_HEADER + "\\n" + SECRET + '"}\n',
           "cloud/.aws/credentials": f"[default]\naws_secret_access_key = {SECRET}\n",
           "boto.cfg": f"[Credentials]\naws_secret_access_key = {AWS_KEY}\n# {SECRET}\n"}
HEAVY = {"checkpoints/step-1.pt": SECRET, "wandb/run-1/log": SECRET}
CODE = {"train.py": "print('training')\n", "requirements.txt": "numpy\n", "pkg/model.py": "x = 1\n",
        ".env.example": "TOKEN=\n"}
Project = Callable[..., Path]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)


def _refused(root: Path) -> list[str]:
    with pytest.raises(SecretRefused) as info:
        select(root)
    return info.value.lines()


def test_secret_looking_files_are_refused_one_line_each_naming_the_file(tmp_path: Path) -> None:
    _write(tmp_path, {**CODE, **SECRETS, **HEAVY})
    lines = _refused(tmp_path)
    assert [line.split(": looks like")[0] for line in lines] == [
        f"{tmp_path}/{name}" for name in sorted(SECRETS)]
    assert lines[0] == (f"{tmp_path}/.env: looks like a secret (its name matches .env) and would leave this machine "
                        "in the image or the code ConfigMap; leave it out with a line `.env` in .kubetrainignore, or "
                        "ship it on purpose with `!.env` there")
    reasons = dict(line.split(": looks like a secret ", 1) for line in lines)
    assert reasons[f"{tmp_path}/deploy/ops.txt"].startswith(f"(it holds {KEY_HEADER})")
    assert reasons[f"{tmp_path}/gcp.json"].startswith(f"(it holds {PKCS8_HEADER})")
    assert reasons[f"{tmp_path}/boto.cfg"].startswith("(it holds aws_secret_access_key with a value)")
    assert reasons[f"{tmp_path}/cloud/.aws/credentials"].startswith("(its name matches */.aws/credentials)")
    assert all(SECRET not in line for line in lines)  # the message names the file, never its content


def _files(root: Path) -> list[str]:
    return [e.path for e in select(root).entries if e.kind != "dir"]


def test_ignored_secrets_stay_out_and_an_explicit_reinclusion_ships_one(tmp_path: Path) -> None:
    _write(tmp_path, {**CODE, **SECRETS, **HEAVY,
                      ".gitignore": ".env*\n!.env.example\n*.key\nid_rsa\n",
                      ".kubetrainignore": "deploy/ops.txt\ngcp.json\n**/.aws\nboto.cfg\n"})
    selection = select(tmp_path)
    assert _files(tmp_path) == [".env.example", ".gitignore", "pkg/model.py", "requirements.txt", "train.py"]
    assert selection.left_out == [
        (".env", ".gitignore"), (".env.local", ".gitignore"), (".kubetrainignore", "kubetrain default"),
        ("boto.cfg", ".kubetrainignore"), ("checkpoints/", "kubetrain default"), ("cloud/.aws/", ".kubetrainignore"),
        ("deploy/ops.txt", ".kubetrainignore"), ("gcp.json", ".kubetrainignore"), ("id_rsa", ".gitignore"),
        ("server.key", ".gitignore"), ("wandb/", "kubetrain default")]
    (tmp_path / ".kubetrainignore").write_text("deploy/ops.txt\ngcp.json\n**/.aws\nboto.cfg\n!server.key\n")
    assert "server.key" in _files(tmp_path)  # shipped on purpose: not refused


def test_a_reinclusion_in_dockerignore_or_gitignore_is_not_permission_to_ship_a_secret(tmp_path: Path) -> None:
    _write(tmp_path, {**CODE, "server.key": SECRET, ".dockerignore": "*\n!train.py\n!server.key\n"})
    assert [line.split(":")[0] for line in _refused(tmp_path)] == [f"{tmp_path}/server.key"]


@pytest.mark.parametrize("dockerfile", [None, "Dockerfile"])
def test_the_image_context_and_the_code_configmap_select_the_same_files(tmp_path: Path, project: Project,
                                                                          dockerfile: str | None) -> None:
    build = "build: {variant: cpu}\n" if dockerfile is None else f"build: {{dockerfile: {dockerfile}}}\n"
    spec = project(build="code: {path: .}\n" + build, files={
        **CODE, **HEAVY, "data/big.csv": "1,2\n", "notes.md": "n\n", "jobs/other.yaml": "kind: x\n", ".env": SECRET,
        ".gitignore": "data/\n", ".dockerignore": "*.md\n", ".kubetrainignore": "requirements.txt\n.env\n",
        "Dockerfile": "FROM scratch\nCOPY . /workspace/\n"})
    shipped = [path for path, _ in collect_code(spec.parent).files]
    assembled = assemble(plan_build(load_spec(str(spec))), tmp_path / "staging")
    staged = assembled.context / ("workspace" if dockerfile is None else "")
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == shipped
    assert shipped == [".dockerignore", ".env.example", ".gitignore", "Dockerfile", "jobs/other.yaml",
                       "pkg/model.py", "train.py"]


def test_kubetrain_state_and_render_output_never_leave(tmp_path: Path) -> None:
    _write(tmp_path, {"train.py": "x", ".kubetrain/volumes/ckpt/step.pt": SECRET, "deploy/job.yaml": "kind: x\n",
                      "deploy/.kubetrain-render": "job.yaml\n", "out/job.yaml": "y"})
    selection = select(tmp_path, skip=(tmp_path / "out",))
    assert [e.path for e in selection.entries] == ["train.py"]
    assert {path: why for path, why in selection.left_out} == {
        ".kubetrain/": "kubetrain's state", "deploy/": "render output", "out/": "render output"}


def test_build_dry_run_lists_the_context_and_says_what_it_left_out(project: Project) -> None:
    spec = project(files={**CODE, **HEAVY, ".gitignore": ".env*\n!.env.example\n", ".env": SECRET})
    result = CliRunner().invoke(cli, ["build", "-f", str(spec), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [".env.example", ".gitignore", "pkg/model.py", "requirements.txt",
                                          "train.py"]
    assert result.stderr == ("left out: .env (.gitignore), checkpoints/ (kubetrain default), kubetrain.yaml "
                             "(a kubetrain spec), wandb/ (kubetrain default)\n")
    assert SECRET not in result.output


@pytest.mark.parametrize("verb", [["build", "--dry-run"], ["build"], ["render"], ["render", "--out", "deploy"]])
def test_every_verb_refuses_a_secret_with_exit_2_and_one_line(verb: list[str], project: Project) -> None:
    spec = project(build="code: {path: .}\n", files={**CODE, "id_rsa": f"{KEY_HEADER}\n{SECRET}\n"})
    result = CliRunner().invoke(cli, [verb[0], "-f", str(spec), *verb[1:]])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == (f"error: {spec.parent}/id_rsa: looks like a secret (its name matches id_rsa) and would "
                             "leave this machine in the image or the code ConfigMap; leave it out with a line "
                             "`id_rsa` in .kubetrainignore, or ship it on purpose with `!id_rsa` there\n")
    assert not (spec.parent / "deploy").exists()


def test_render_ships_no_secret_byte_and_says_nothing_of_one(project: Project) -> None:
    spec = project(build="code: {path: .}\n", files={**CODE, **SECRETS, **HEAVY, ".gitignore": ".env*\n!.env.example\n"
                                                     "*.key\nid_rsa\ndeploy/\ngcp.json\n**/.aws/\nboto.cfg\n"})
    result = CliRunner().invoke(cli, ["render", "-f", str(spec)])
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    configmap = next(doc for doc in yaml.safe_load_all(result.stdout) if doc["kind"] == "ConfigMap")
    assert sorted(configmap["data"]) == [".env.example", ".gitignore", "pkg.model.py", "requirements.txt", "train.py"]
