"""`kubetrain build` end to end through the CLI, with recording fakes standing in for docker/podman/kind."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from recording import FakeBin

from kubetrain.cli.main import cli
from kubetrain.imagebuild import build_image
from kubetrain.jobspec.load import load_spec

Project = Callable[..., Path]
BUILDKIT_FAILURE = """\
#1 [internal] load build definition from Dockerfile
#5 [2/9] COPY kubetrain/ensure-torch.sh /opt/kubetrain/ensure-torch.sh
#5 DONE 0.0s
#9 [7/9] RUN if [ -s /opt/kubetrain/requirements.txt ]; then python3 -m pip install -r x; fi
#9 1.234 ERROR: Could not find a version that satisfies the requirement numpy==9.9
#9 ERROR: process "/bin/bash -o pipefail -c pip install" did not complete successfully: exit code: 1
ERROR: failed to solve: process "/bin/bash -c pip install" did not complete successfully: exit code: 1
"""


def run(spec: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["build", "-f", str(spec), *args])


def staged(argv: list[str]) -> tuple[str, str]:
    """(staging Dockerfile, staging context) from a recorded build argv."""
    return argv[argv.index("-f") + 1], argv[-1]


def test_docker_build_exact_commands_and_stdout(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "image", "inspect", exit=1, stderr="No such image\n")
    spec = project()
    result = run(spec)
    assert result.exit_code == 0, result.output
    ref = result.stdout.strip()
    assert ref.startswith("ghcr.io/acme/digits:kt-")
    argvs = fakebin.argvs()
    dockerfile, context = staged(argvs[2])
    assert argvs == [
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        ["docker", "image", "inspect", ref],
        ["docker", "build", "--progress=plain", "-f", dockerfile, "-t", ref, context],
    ]
    assert Path(dockerfile).name == "Dockerfile" and Path(context).name == "context"
    assert Path(context).parent == Path(dockerfile).parent
    assert Path(context).is_relative_to(spec.parent / ".kubetrain")  # staged beside the context: hard links
    assert not Path(context).exists()  # and cleaned up
    build = fakebin.calls()[2]
    assert "workspace/train.py" in build["context_files"]
    assert "kubetrain/src/kubetrain/runtime/" not in build["context_files"]
    assert build["requirements"] == "numpy==2.1.0\n"
    assert "FROM ${BASE_IMAGE}" in build["dockerfile"]


def test_same_inputs_same_tag_and_existing_tag_skips_the_build(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker")  # image inspect exits 0: the tag exists
    spec = project()
    first, second = run(spec), run(spec)
    assert first.stdout == second.stdout
    assert [a for a in fakebin.argvs() if a[1] == "build"] == []
    assert "already exists locally (docker); not building" in first.stderr


def test_build_args_platform_and_cpu_variant(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "image", "inspect", exit=1)
    spec = project(build="""\
        build:
          variant: cpu
          baseImage: python:3.12-slim
          platform: linux/amd64
          buildArgs: {TORCH_VERSION: 2.13.0}
        """)
    ref = run(spec).stdout.strip()
    build = fakebin.argvs()[-1]
    dockerfile, context = staged(build)
    assert build == ["docker", "build", "--progress=plain", "-f", dockerfile, "-t", ref,
                     "--platform", "linux/amd64", "--build-arg", "BASE_IMAGE=python:3.12-slim",
                     "--build-arg", "TORCH_VERSION=2.13.0", context]
    assert "download.pytorch.org/whl/cpu" in fakebin.calls()[-1]["dockerfile"]


def test_push_checks_the_registry_then_builds_and_pushes(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "manifest", "inspect", exit=1)
    fakebin.on("docker", "image", "inspect", exit=1)
    result = run(project(), "--push")
    ref = result.stdout.strip()
    assert result.exit_code == 0, result.output
    argvs = fakebin.argvs()
    assert argvs[1:3] == [["docker", "manifest", "inspect", ref], ["docker", "image", "inspect", ref]]
    assert argvs[3][:2] == ["docker", "build"]
    assert argvs[4:] == [["docker", "push", ref]]


def test_push_skips_build_and_push_when_the_registry_has_the_tag(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker")  # manifest inspect exits 0
    result = run(project(), "--push")
    ref = result.stdout.strip()
    assert fakebin.argvs()[1:] == [["docker", "manifest", "inspect", ref]]
    assert "already in the registry" in result.stderr


def test_local_image_is_pushed_without_rebuilding(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "manifest", "inspect", exit=1)
    ref = run(project(), "--push").stdout.strip()
    assert fakebin.argvs()[1:] == [["docker", "manifest", "inspect", ref],
                                   ["docker", "image", "inspect", ref],
                                   ["docker", "push", ref]]


def test_push_failure_shows_tool_output_and_a_login_hint(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "manifest", "inspect", exit=1).on(
        "docker", "push", exit=1, stdout="denied: requested access to the resource is denied\n")
    result = run(project(), "--push")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-3].startswith("error: pushing ghcr.io/acme/digits:kt-")
    assert lines[-3].endswith("exited 1")
    assert lines[-2] == "error:   | denied: requested access to the resource is denied"
    assert lines[-1] == "error: log in first (`docker login ghcr.io`) if the registry needs it"


def test_kind_load_with_docker(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker", "kind").on("kind", "get", "clusters", stdout="other\nkubetrain\n")
    ref = run(project(), "--kind", "kubetrain").stdout.strip()
    assert fakebin.argvs() == [
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        ["kind", "get", "clusters"],
        ["docker", "image", "inspect", ref],
        ["kind", "load", "docker-image", ref, "--name", "kubetrain"],
    ]


def test_kind_load_with_podman_goes_through_an_archive(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("podman", "kind").on("kind", "get", "clusters", stdout="dev\n").on(
        "podman", "image", "exists", exit=1).on("kind", "get", "nodes", stdout="dev-control-plane\ndev-worker\n")
    result = run(project(), "--kind", "dev", "--builder", "podman")
    assert result.exit_code == 0, result.output
    ref = result.stdout.strip()
    argvs = fakebin.argvs()
    dockerfile, context = staged(argvs[2])
    archive = str(Path(context).parent / "image.tar")
    assert argvs == [
        ["kind", "get", "clusters"],
        ["podman", "image", "exists", ref],
        ["podman", "build", "--format", "docker", "-f", dockerfile, "-t", ref, context],
        ["kind", "get", "nodes", "--name", "dev"],
        *node_probes("dev-control-plane", ref),  # no layer of the image in either node: the whole image,
        *node_probes("dev-worker", ref),  # through an archive, as kind opens it once for each node
        ["podman", "save", "-o", archive, ref],
        ["kind", "load", "image-archive", archive, "--name", "dev", "--nodes", "dev-control-plane,dev-worker"],
    ]


def test_kind_load_into_one_node_streams_podman_save(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("podman", "kind").on("kind", "get", "clusters", stdout="dev\n").on(
        "kind", "get", "nodes", stdout="dev-control-plane\n").on("podman", "save", stdout="<docker archive>")
    result = run(project(), "--kind", "dev", "--builder", "podman")
    assert result.exit_code == 0, result.output
    ref = result.stdout.strip()
    assert fakebin.argvs()[-6:] == [
        ["kind", "get", "nodes", "--name", "dev"],
        *node_probes("dev-control-plane", ref),
        ["podman", "save", ref],
        ["kind", "load", "image-archive", "/dev/stdin", "--name", "dev", "--nodes", "dev-control-plane"],
    ]
    assert fakebin.calls()[-1]["stdin"] == "<docker archive>"  # what podman save wrote, through the pipe


def node_probes(node: str, ref: str) -> list[list[str]]:
    """What `build --kind` asks a node's containerd first: the tag, then the layers it has."""
    ctr = ["podman", "exec", "-i", node, "ctr", "--namespace", "k8s.io"]
    return [[*ctr, "images", "ls", "-q", f"name=={ref}"], [*ctr, "content", "ls", "-q"], [*ctr, "images", "ls"]]


def test_a_kind_node_that_has_the_tag_is_not_loaded_again(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("podman", "kind").on("kind", "get", "clusters", stdout="dev\n").on(
        "kind", "get", "nodes", stdout="dev-control-plane\n")
    spec = project()
    ref = run(spec, "--builder", "podman").stdout.strip()
    fakebin.on("podman", "exec", "-i", "dev-control-plane", "ctr", "--namespace", "k8s.io", "images", "ls",
               stdout=f"{ref}\n")
    fakebin.reset_log()
    result = run(spec, "--kind", "dev", "--builder", "podman")
    assert result.exit_code == 0, result.output
    assert f"{ref} is already in kind node dev-control-plane; not loading" in result.stderr
    assert not [a for a in fakebin.argvs() if a[1] in ("save", "push", "load")], fakebin.argvs()


def test_a_kind_node_with_the_lower_layers_gets_only_the_new_ones(fakebin: FakeBin, project: Project) -> None:
    """The node holds every layer but the top few as stored: `push oci:` over placeholders of the known blobs
    (the new ones gzip-compressed), never a save of the whole image. The real copy and import run in
    tests/kind; the fake podman writes nothing, which must end as one error line."""
    ctr = ["podman", "exec", "-i", "dev-control-plane", "ctr", "--namespace", "k8s.io"]
    lower = [f"sha256:{c * 64}" for c in "abcde"]
    manifest = '{"layers": [' + ", ".join(f'{{"digest": "{d}", "size": 5}}' for d in lower) + "]}"
    fakebin.install("podman", "kind").on("kind", "get", "clusters", stdout="dev\n").on(
        "kind", "get", "nodes", stdout="dev-control-plane\n").on("podman", "image", "exists", exit=1)
    fakebin.on(*ctr, "content", "ls", stdout="\n".join([*lower, f"sha256:{'m' * 64}"]) + "\n")
    fakebin.on(*ctr, "images", "ls", "-q", stdout="")
    fakebin.on(*ctr, "images", "ls", stdout=f"REF TYPE DIGEST\nbase:1 x sha256:{'m' * 64}\n")
    fakebin.on(*ctr, "content", "get", stdout=manifest)
    layers = ", ".join(f'"{d}"' for d in [*lower, *(f"sha256:{c * 64}" for c in "fgh")])
    fakebin.on("podman", "image", "inspect", stdout=f"[{layers}]\n")
    result = run(project(), "--kind", "dev", "--builder", "podman")
    argvs = fakebin.argvs()
    push = argvs[-1]
    assert push[:2] == ["podman", "push"] and argvs[1][-1] in push and push[-1].startswith("oci:"), push
    assert not [a for a in argvs if a[1] == "save" or (a[0] == "kind" and a[1] == "load")], argvs
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "writing image-new-blobs.tar" in errors[0], result.stderr


def test_a_failed_podman_save_into_kind_is_named_as_the_cause(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("podman", "kind").on("kind", "get", "clusters", stdout="dev\n").on(
        "kind", "get", "nodes", stdout="dev-control-plane\n").on(
        "podman", "save", exit=125, stderr="Error: no space left on device\n").on(
        "kind", "load", exit=1, stderr="ERROR: failed to load image: unexpected EOF\n")
    result = run(project(), "--kind", "dev", "--builder", "podman")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[-2].startswith("error: saving ghcr.io/") and lines[-2].endswith("` exited 125"), lines
    assert lines[-1] == "error:   | Error: no space left on device"


def test_containerd_load_copies_out_of_podman_then_imports_with_ctr(fakebin: FakeBin, project: Project) -> None:
    """The command sequence; the real copy and import (new layers only) run in tests/e2e on a real containerd.
    Here the fake podman writes nothing, which must end as one clear error line, not a traceback."""
    sock = "/run/kt/containerd.sock"
    fakebin.install("podman", "ctr").on("podman", "image", "exists", exit=1)
    result = run(project(), "--containerd", sock, "--builder", "podman")
    argvs = fakebin.argvs()
    dockerfile, context = staged(argvs[2])
    ref = argvs[1][-1]
    ctr = ["ctr", "--address", sock, "--namespace", "k8s.io"]
    assert argvs == [
        ["ctr", "--address", sock, "version"],
        ["podman", "image", "exists", ref],
        ["podman", "build", "--format", "docker", "-f", dockerfile, "-t", ref, context],
        [*ctr, "images", "ls", "-q", f"name=={ref}"],
        [*ctr, "content", "ls", "-q"],  # the layers containerd has: none here, so the whole image, via dir:
        [*ctr, "images", "ls"],
        ["podman", "push", ref, f"dir:{Path(context).parent / 'image-dir'}"],
    ]
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: writing image-new-blobs.tar from podman's copy of "
                                                     f"{ref}: "), result.stderr
    assert "Traceback" not in result.stderr


def test_containerd_that_has_the_tag_is_not_loaded_again(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("podman", "ctr")  # podman: the tag exists; ctr answers every call with exit 0
    spec = project()
    ref = run(spec, "--builder", "podman").stdout.strip()
    fakebin.on("ctr", "--address", "/s", "--namespace", "k8s.io", "images", "ls", stdout=f"{ref}\n")
    fakebin.reset_log()
    result = run(spec, "--containerd", "/s", "--builder", "podman")
    assert result.exit_code == 0, result.output
    assert f"{ref} is already in containerd at /s; not loading" in result.stderr
    assert not [a for a in fakebin.argvs() if a[1] in ("save", "build") or "import" in a]


def test_unreachable_containerd_fails_before_building(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("podman", "ctr").on("ctr", exit=1, stderr="connection refused\n")
    result = run(project(), "--containerd", "/nowhere.sock", "--builder", "podman")
    assert result.exit_code == 1
    assert "--containerd /nowhere.sock: containerd is not reachable there" in result.stderr
    assert not [a for a in fakebin.argvs() if a[0] == "podman" and a[1] == "build"]


def test_missing_kind_cluster_fails_before_building(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker", "kind").on("kind", "get", "clusters", stdout="other\n")
    result = run(project(), "--kind", "kubetrain")
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: kind cluster 'kubetrain' not found; create it with "
                                     "`kubetrain cluster create --name kubetrain`")
    assert fakebin.argvs()[-1] == ["kind", "get", "clusters"]


def test_builder_failure_names_the_step_and_shows_the_last_lines(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "image", "inspect", exit=1).on(
        "docker", "build", exit=1, stdout=BUILDKIT_FAILURE)
    result = run(project())
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors[0] == ("error: docker build failed at step 7/9 RUN if [ -s "
                         "/opt/kubetrain/requirements.txt ]; "
                         "then python3 -m pip install -r x; fi (exit code 1); its last lines:")
    assert errors[-1].startswith("error:   | ERROR: failed to solve: process")
    missing = "error:   | #9 1.234 ERROR: Could not find a version that satisfies the requirement numpy==9.9"
    assert missing in errors
    assert "#5 [2/9] COPY" in result.stderr  # the builder's output was streamed as it came


@pytest.mark.parametrize(("builder", "output", "step"), [
    ("podman", "STEP 1/3: FROM python:3.12-slim\nSTEP 2/3: RUN false\nError: building at STEP \"RUN "
               "false\"\n",
     "2/3 RUN false"),
    ("buildah", "STEP 1/2: FROM x\nSTEP 2/2: COPY missing /x\nError: no such file\n", "2/2 COPY missing /x"),
])
def test_daemonless_builder_failures(fakebin: FakeBin, project: Project, builder: str, output: str,
                                     step: str) -> None:
    fakebin.install(builder).on(builder, "build", exit=2, stdout=output).on(builder, "image", exit=1).on(
        builder, "inspect", exit=1)
    result = run(project(), "--builder", builder)
    assert result.exit_code == 1
    assert f"error: {builder} build failed at step {step} (exit code 2); its last lines:" in result.stderr
    build = next(a for a in fakebin.argvs() if a[1] == "build")
    # --format docker: the OCI config format has no SHELL, so `SHELL [...]` would be dropped.
    assert build[:5] == ([builder, "build", "--layers", "--format", "docker"] if builder == "buildah"
                         else [builder, "build", "--format", "docker", "-f"])


def test_no_builder_installed_is_one_line(fakebin: FakeBin, project: Project) -> None:
    result = run(project())
    assert result.exit_code == 1
    assert result.stderr == ("error: no container builder found on PATH: install docker or podman (or "
                             "nerdctl, "
                             "buildah), or pick one with --builder\n")


def test_chosen_builder_missing(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker")
    result = run(project(), "--builder", "nerdctl")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: nerdctl is not installed (not on PATH): install docker or podman")
    assert fakebin.argvs() == []


def test_docker_daemon_down_falls_back_to_podman(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker", "podman").on("docker", "info", exit=1, stderr="Cannot connect to the "
                                                                            "Docker daemon\n")
    result = run(project())
    assert result.exit_code == 0, result.output
    assert [a[:2] for a in fakebin.argvs()] == [["docker", "info"], ["podman", "image"]]


def test_docker_daemon_down_and_nothing_else(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "info", exit=1, stderr="Cannot connect to the Docker daemon "
                                                                  "at x\n")
    result = run(project())
    assert result.exit_code == 1
    assert result.stderr == ("error: docker is installed but its daemon is not reachable (Cannot "
                             "connect to the "
                             "Docker daemon at x): start it, or install docker or podman (or nerdctl, "
                             "buildah), "
                             "or pick one with --builder\n")


def test_bad_spec_is_one_line_before_any_command(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker")
    result = run(project(build="build:\n  repository: Not/Valid\n"))
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1
    assert "spec.build.repository: 'Not/Valid' is not a valid image repository" in result.stderr
    assert fakebin.argvs() == []


def test_nerdctl_remote_check_uses_skopeo_when_present(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("nerdctl", "skopeo")
    ref = run(project(), "--push", "--builder", "nerdctl").stdout.strip()
    assert fakebin.argvs() == [["nerdctl", "info", "--format", "{{.ServerVersion}}"],
                               ["skopeo", "inspect", "--raw", f"docker://{ref}"]]


def test_library_returns_the_same_reference_the_cli_prints(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker")
    spec = project()
    lines: list[str] = []
    ref = build_image(load_spec(str(spec)), builder="docker", echo=lines.append)
    assert ref == run(spec).stdout.strip()
    assert any("already exists locally" in line for line in lines)


def test_help_does_not_import_build_kind_torch_or_kubernetes() -> None:
    code = ("import sys; from kubetrain.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'kubernetes')\n"
            "       or m.startswith(('kubetrain.imagebuild', 'kubetrain.kind'))]\n"
            "assert not bad, bad\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "build" in done.stdout and "cluster" in done.stdout


def test_containerd_with_gzipped_lower_layers_gets_the_image_uncompressed(fakebin: FakeBin, project: Project) -> None:
    """containerd has layers, but not the image's lower ones as stored (its copies are gzip-compressed, from an
    earlier `push oci:`): `push oci:` would gzip the whole image again, on every load, so dir: is used."""
    ctr = ["ctr", "--address", "/s", "--namespace", "k8s.io"]
    manifest = '{"layers": [{"digest": "sha256:' + "a" * 64 + '", "size": 5}]}'
    fakebin.install("podman", "ctr").on("podman", "image", "exists", exit=1)
    fakebin.on(*ctr, "content", "ls", stdout=f"sha256:{'a' * 64}\nsha256:{'m' * 64}\n")
    fakebin.on(*ctr, "images", "ls", "-q", stdout="")
    fakebin.on(*ctr, "images", "ls", stdout=f"REF TYPE DIGEST\nold:1 x sha256:{'m' * 64}\n")
    fakebin.on(*ctr, "content", "get", stdout=manifest)
    layers = ", ".join(f'"sha256:{c * 64}"' for c in "bcdef")
    fakebin.on("podman", "image", "inspect", stdout=f"[{layers}]\n")
    result = run(project(), "--containerd", "/s", "--builder", "podman")
    argvs = fakebin.argvs()
    assert ["podman", "image", "inspect", "--format", "{{json .RootFS.Layers}}", argvs[1][-1]] in argvs
    assert argvs[-1][:3] == ["podman", "push", argvs[1][-1]] and argvs[-1][3].startswith("dir:"), argvs[-1]
    assert "containerd lacks 1 lower layer(s)" in result.stderr, result.stderr
