"""`kubetrain build` never makes an image that cannot serve the spec: torch.compile needs a C compiler and
DeepSpeed needs nvcc, which `-runtime` CUDA images (and python slim) lack. The default base is swapped for its
devel/full variant (said on stderr); a base or Dockerfile the user chose is refused naming what to use."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from recording import FakeBin

from kubetrain.cli.main import cli
from kubetrain.errors import BuildError
from kubetrain.imagebuild import toolchain
from kubetrain.imagebuild.plan import images_dir, plan_build
from kubetrain.jobspec.load import load_spec
from tests.imagebuild.test_build_hash import Project

COMPILE = "train:\n  model: m:model\n  dataset: m:data\n  compile: true\n"
DEFAULT_BASE = "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


def test_the_default_base_is_read_from_kubetrains_dockerfile() -> None:
    assert toolchain.base_image((images_dir() / "Dockerfile").read_text(), {}) == DEFAULT_BASE
    cpu = toolchain.base_image((images_dir() / "Dockerfile.cpu").read_text(), {})
    assert cpu == "docker.io/library/python:3.12-slim"
    assert toolchain.base_image("ARG B=x\nFROM ${B}:1\n", {"B": "y"}) == "y:1"


@pytest.mark.parametrize(("image", "compiler", "nvcc"), [
    ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", True, True),
    ("nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04", True, True),
    ("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-devel", False, False),
    ("python:3.12-slim", True, False),
    ("python:3.12", False, False),
    ("ghcr.io/acme/base:1", False, False),  # unknown: not refused on a guess
])
def test_what_known_bases_lack(image: str, compiler: bool, nvcc: bool) -> None:
    assert (toolchain.lacks(image, "compiler"), toolchain.lacks(image, "nvcc")) == (compiler, nvcc)


def test_compile_on_the_default_base_builds_on_its_devel_variant(project: Project) -> None:
    plan = plan_build(load_spec(str(project(build=COMPILE))))
    devel = "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-devel"
    assert plan.build_args["BASE_IMAGE"] == devel and plan.base_image == devel
    assert plan.notes == (f"{DEFAULT_BASE} has no C compiler: torch.compile (spec.train.compile) needs a C compiler "
                          "in the container (Triton builds its launcher at the first compiled step); building on "
                          f"{devel} instead (larger, but it has them)",)
    assert plan_build(load_spec(str(project()))).notes == ()  # no compile: the runtime base stays


def test_deepspeed_in_the_requirements_needs_nvcc(project: Project) -> None:
    spec = project(files={"train.py": "", "requirements.txt": "numpy\nDeepSpeed==0.16.2\n"})
    plan = plan_build(load_spec(str(spec)))
    assert plan.build_args["BASE_IMAGE"].endswith("-devel") and "nvcc (CUDA toolkit)" in plan.notes[0]


def test_compile_on_the_cpu_variant_uses_the_full_python_image(project: Project) -> None:
    plan = plan_build(load_spec(str(project(build=COMPILE + "build:\n  variant: cpu\n"))))
    assert plan.build_args["BASE_IMAGE"] == "docker.io/library/python:3.12"


@pytest.mark.parametrize(("build", "message"), [
    ("build:\n  baseImage: nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04\n",
     "spec.build.baseImage: nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04 has no C compiler: torch.compile "
     "(spec.train.compile) needs a C compiler in the container (Triton builds its launcher at the first compiled "
     "step); use nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04, or install it in your Dockerfile"),
    ("build:\n  dockerfile: Dockerfile\n",
     "spec.build.dockerfile: docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime has no C compiler"),
])
def test_a_base_the_user_chose_is_refused_with_what_to_use(project: Project, build: str, message: str) -> None:
    files = {"train.py": "", "Dockerfile": f"FROM {DEFAULT_BASE}\nCOPY . /app\n"}
    spec = project(build=COMPILE + build, files=files)
    with pytest.raises(BuildError) as info:
        plan_build(load_spec(str(spec)))
    assert str(info.value).startswith(f"{spec}: {message}")


def test_a_dockerfile_that_installs_a_compiler_is_fine(project: Project) -> None:
    dockerfile = f"FROM {DEFAULT_BASE}\nRUN apt-get update && apt-get install -y build-essential\nCOPY . /app\n"
    spec = project(build=COMPILE + "build:\n  dockerfile: Dockerfile\n",
                   files={"train.py": "", "Dockerfile": dockerfile})
    assert plan_build(load_spec(str(spec))).notes == ()


def test_build_says_which_base_it_used_and_builds_on_it(fakebin: FakeBin, project: Project) -> None:
    fakebin.install("docker").on("docker", "image", "inspect", exit=1, stderr="No such image\n")
    result = CliRunner().invoke(cli, ["build", "-f", str(project(build=COMPILE))])
    assert result.exit_code == 0, result.output
    assert "kubetrain: docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime has no C compiler" in result.stderr
    [build] = [a for a in fakebin.argvs() if a[1] == "build"]
    assert "BASE_IMAGE=docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-devel" in build


def test_build_refuses_in_one_line(project: Project, fakebin: FakeBin) -> None:
    fakebin.install("docker")
    spec = project(build=COMPILE + "build:\n  baseImage: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime\n")
    result = CliRunner().invoke(cli, ["build", "-f", str(spec)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and "use pytorch/pytorch:2.13.0-cuda13.0-cudnn9-devel" in result.stderr
    assert [a for a in fakebin.argvs() if a[1] == "build"] == []
