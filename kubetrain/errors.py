"""Typed exceptions. The CLI turns them into one-line messages and exit codes, once, at its edge."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubetrain.fieldpath import join_path


class KubetrainError(Exception):
    """Base of every error kubetrain reports to a user. ``str()`` is the human message."""

    exit_code = 1

    def lines(self) -> list[str]:
        """The message as lines, for errors that carry several problems."""
        return [str(self)]


@dataclass(frozen=True)
class Problem:
    """One problem in a file: where it is and what is wrong."""

    field: str
    message: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"


class SpecError(KubetrainError):
    """The job spec (or a command line) is invalid. Carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: Iterable[Problem] | str) -> None:
        self.problems = [Problem("", problems)] if isinstance(problems, str) else list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


class UsageError(KubetrainError):
    """Bad command-line usage (flags that conflict, a missing file argument...)."""

    exit_code = 2


class RenderError(KubetrainError):
    """The spec is valid but cannot be rendered (e.g. code directory too large for a ConfigMap)."""

    exit_code = 2


class RejectedRender(RenderError):
    """Kubernetes' rules refuse a rendered object. `rejected`: (rendered path, message, the rendered value at
    that path) for each refusal, so that the caller holding the spec can name the spec field instead."""

    def __init__(self, where: str, rejected: list[tuple[tuple[str | int, ...], str, object]]) -> None:
        self.where = where
        self.rejected = rejected
        super().__init__(str(self))

    def __str__(self) -> str:
        return "; ".join(f"the rendered {self.where} would be rejected: {join_path(path)}: {message}"
                         for path, message, _ in self.rejected[:3])


class OutputError(KubetrainError):
    """Writing the result failed (a full disk, a read-only target...)."""

    exit_code = 1


class SchemaError(KubetrainError):
    """A schema needed for validation is missing or unusable."""

    exit_code = 2


class ClusterError(KubetrainError):
    """Talking to the cluster failed: unreachable, forbidden, missing CRD or namespace..."""

    exit_code = 1


class KubeconfigError(ClusterError):
    """No usable kubeconfig (missing, unreadable, no such context): input the user must fix, not a cluster
    that failed, so the usage exit code."""

    exit_code = 2


class SecretRefused(KubetrainError):
    """Files that look like secrets would leave the machine (in an image or the code ConfigMap): one line
    each, naming the file, why it looks like one, and the two ways out."""

    exit_code = 2

    def __init__(self, root: object, found: list[tuple[str, str]]) -> None:
        self.root = root
        self.found = found
        super().__init__(str(self))

    def lines(self) -> list[str]:
        return [f"{self.root}/{path}: looks like a secret ({why}) and would leave this machine in the image or "
                f"the code ConfigMap; leave it out with a line `{path}` in .kubetrainignore, or ship it on "
                f"purpose with `!{path}` there" for path, why in self.found]

    def __str__(self) -> str:
        return "\n".join(self.lines())


class BuildError(KubetrainError):
    """Building or pushing an image failed."""

    exit_code = 1
