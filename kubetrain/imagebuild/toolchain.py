"""Can the image serve what the spec asks of it? Compilers and nvcc, decided before anything is built.

- torch.compile needs a C compiler in the container: Triton builds a small C launcher at the first compiled
  step on a GPU (pytorch/pytorch#116696), and inductor compiles C++ on a CPU. `*-runtime` CUDA images
  (pytorch/pytorch, nvidia/cuda) and python:*-slim have none; their `-devel` / full counterparts do.
- DeepSpeed needs nvcc (CUDA_HOME) to install and to JIT-build its ops; only `-devel` CUDA images have it.

kubetrain's own Dockerfile on its default base is fixed (the devel/full variant of that base, said on stderr);
a base or Dockerfile the user chose is refused with the image to use instead. Pure functions over text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", re.MULTILINE)
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.MULTILINE)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_REQUIREMENT = re.compile(r"^\s*deepspeed(?![A-Za-z0-9_.-])", re.IGNORECASE | re.MULTILINE)
_INSTALLS_COMPILER = re.compile(r"\b(build-essential|gcc|g\+\+|clang|cuda-nvcc|cuda-toolkit)\b")
_INSTALLS_NVCC = re.compile(r"\b(cuda-nvcc|cuda-toolkit|cuda-compiler)\b")
_CUDA_REPOS = ("pytorch/pytorch", "nvidia/cuda", "nvcr.io/nvidia/cuda")


@dataclass(frozen=True)
class Need:
    """One thing the spec needs from the image, and the spec field that asks for it."""

    field: str
    what: str  # "compiler" or "nvcc"
    why: str


def needs(compile_model: bool, requirements: str) -> list[Need]:
    found = []
    if compile_model:
        found.append(Need("spec.train.compile", "compiler", "torch.compile (spec.train.compile) needs a C compiler "
                          "in the container (Triton builds its launcher at the first compiled step)"))
    if _REQUIREMENT.search(requirements):
        found.append(Need("spec.build.requirements", "nvcc", "deepspeed (in the requirements) needs nvcc to "
                          "install and to build its ops"))
    return found


def base_image(dockerfile: str, build_args: dict[str, str]) -> str | None:
    """The first FROM of a Dockerfile with its ARGs resolved (build args over the ARG defaults)."""
    first = _FROM.search(dockerfile)
    if first is None:
        return None
    values: dict[str, str] = {}
    for name, default in _ARG.findall(dockerfile[:first.start()]):
        values[name] = build_args.get(name, _expand(default, values))
    return _expand(first.group(1), values)


def _expand(text: str, values: dict[str, str]) -> str:
    return _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), ""), text)


def lacks(image: str, what: str) -> bool:
    """Known not to have a compiler (or nvcc): CUDA `runtime` images, and python slim images."""
    repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    if repository.endswith(_CUDA_REPOS) and "runtime" in tag:
        return True
    return what == "compiler" and repository.rsplit("/", 1)[-1] == "python" and tag.endswith("-slim")


def has_variant(image: str) -> str | None:
    """The devel (CUDA) or full (python) counterpart of a runtime/slim image."""
    repository, _, tag = image.rpartition(":")
    if "runtime" in tag:
        return f"{repository}:{tag.replace('runtime', 'devel')}"
    if tag.endswith("-slim"):
        return f"{repository}:{tag.removesuffix('-slim')}"
    return None


def installs(dockerfile: str, what: str) -> bool:
    """Does the Dockerfile install the tool itself (apt/dnf/conda lines naming it)?"""
    return bool((_INSTALLS_NVCC if what == "nvcc" else _INSTALLS_COMPILER).search(dockerfile))
