"""`kubetrain stacks` on the real node: a running digits job, one worker's training process SIGSTOPped through
exec; the command names that rank as stopped (state T, with its pod and node) and shows the other rank's stack,
`--replica worker-0` gives the same verdict with that pod's stacks only, and `kubetrain status --hang` names
it from the records alone."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from tests.testenv.polling import wait_for

from .conftest import Cli
from .test_recovery import KILL, _exec

pytestmark = [pytest.mark.slow, pytest.mark.torch]
STOP = KILL.replace("SIGKILL", "SIGSTOP")


def _spec(project: Path, name: str) -> Path:
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = name
    spec["spec"]["resources"] = {"cpu": "500m", "memory": "1Gi"}
    spec["spec"]["checkpoint"] = {"dir": f"/ckpt/{name}", "everySteps": 1000, "keep": 1}
    spec["spec"]["train"]["epochs"] = 200  # still training when the test looks; deleted at the end
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def verdict(stacks: str) -> str:
    """The first line without its live reading: rank 0's record can still move (its last steps and eval were
    written after the first command read it, on a busy machine) before it blocks on the stopped rank."""
    return re.sub(r"step \d+, phase \w+", "step N, phase P", stacks.partition("\n")[0])


def test_stacks_names_a_stopped_worker_and_shows_the_other_ranks_stack(cli: Cli, image: str, project: Path,
                                                                        namespace: str, claim: Path,
                                                                        real_node: Any) -> None:
    core = kubernetes.client.CoreV1Api(real_node.cp.api_client())
    name = "digits-stacks"
    cli("submit", "-f", str(_spec(project, name)), "-n", namespace, "--image", image)
    try:
        def both_ranks_train() -> str | None:
            result = cli("stacks", name, "-n", namespace, check=False)
            head = result.stdout.partition("\n")[0]
            return result.stdout if result.returncode == 0 and "phase train" in head and "answer" not in head else None

        before = wait_for(both_ranks_train, f"both ranks of {name} training", 600, 2)
        code, stopped = _exec(core, namespace, f"{name}-worker-0", ["python3", "-c", STOP])
        assert code == 0 and stopped.split(), stopped
        pid = stopped.split()[0]
        result = cli("stacks", name, "-n", namespace)
        out = result.stdout
        stopped_lines = [line for line in out.splitlines() if f"{name}-worker-0 on " in line]
        assert len(stopped_lines) == 1, out
        assert stopped_lines[0].startswith("--- rank 1 (node 2, ")  # worker-0 is node rank 1: ranks 1
        assert stopped_lines[0].endswith(f") stopped (SIGSTOP?), pid {pid}, state T: no stack (a stopped or "
                                         "uninterruptible process cannot run its signal handler)"), out
        assert "--- rank 0 (node 1): training thread, innermost first" in out, out
        assert "1 rank(s) did not answer" in out.splitlines()[0], out
        assert result.returncode == 0
        one = cli("stacks", name, "-n", namespace, "--replica", "worker-0").stdout  # the same verdict, its stacks
        assert verdict(one) == verdict(out), one
        assert stopped_lines[0] in one.splitlines() and "--- rank 0 " not in one, one
        shown = cli("status", name, "-n", namespace, "--hang").stdout
        assert f"1 rank(s) cannot run: rank 1 (node 2, {name}-worker-0 on " in shown, shown
        print(before, out, shown, sep="\n")
    finally:
        cli("delete", name, "-n", namespace, check=False)
