"""How the container starts: torchrun, reading the operator's PET_* variables, then the user's program."""

from __future__ import annotations

import posixpath

from kubetrain.spec.model import JobSpec

PYTHONS = {"python", "python3", "python3.11", "python3.12", "python3.13"}
TRAINER_MODULE = "kubetrain.runtime"


def torchrun_args(spec: JobSpec, workdir: str | None = None) -> list[str]:
    """Arguments to `torchrun` that run the spec's program (rendezvous settings come from PET_* env).

    `python -m mod` becomes `-m mod`, `python script.py` becomes `script.py` (absolute under `workdir`,
    since a TrainJob cannot set the working directory), anything else runs with `--no-python`.
    """
    if spec.command is None:
        return ["-m", TRAINER_MODULE, *spec.args]
    program, *rest = spec.command
    if posixpath.basename(program) in PYTHONS and rest:
        if rest[0] == "-m" and len(rest) > 1:
            return ["-m", *rest[1:], *spec.args]
        if not rest[0].startswith("-"):
            script = rest[0]
            if workdir and not script.startswith("/"):
                script = posixpath.join(workdir, script)
            return [script, *rest[1:], *spec.args]
    return ["--no-python", *spec.command, *spec.args]
