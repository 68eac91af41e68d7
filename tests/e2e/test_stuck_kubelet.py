"""A stuck kubelet on the real node: while it is SIGSTOPped (it holds its connections and answers nothing, as a
hung or partitioned kubelet does), `status`, `logs --tail` and `stacks` of a running digits job each return
within their deadline (--request-timeout) and name the node whose kubelet did not answer; `logs` then exits 3. The
node is still Ready then (the node controller waits 40 s): only the read's own deadline can save the command."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.testenv import node as real
from tests.testenv.polling import wait_for

from .conftest import Cli

pytestmark = [pytest.mark.slow, pytest.mark.torch]
DEADLINE = 3  # --request-timeout
SLACK = 10  # the CLI's own start and API reads on a loaded 2-core machine (docs/performance.md measures it)


def _spec(project: Path, name: str) -> Path:
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = name
    spec["spec"]["nodes"] = 1
    spec["spec"]["resources"] = {"cpu": "500m", "memory": "1Gi"}
    spec["spec"]["checkpoint"] = {"dir": f"/ckpt/{name}", "everySteps": 1000, "keep": 1}
    spec["spec"]["train"]["epochs"] = 200  # still training while the kubelet is stopped; deleted at the end
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_commands_name_the_node_whose_kubelet_is_stuck_within_their_deadline(cli: Cli, image: str, project: Path,
                                                                            namespace: str, claim: Path,
                                                                            real_node: Any) -> None:
    name = "digits-stuck"
    cli("submit", "-f", str(_spec(project, name)), "-n", namespace, "--image", image)
    kubelet = real_node._procs["kubelet"].pid
    try:
        def logging() -> str:
            return cli("logs", name, "-n", namespace, "--tail", "1", check=False).stdout.strip()

        wait_for(logging, f"{name} logging", 600, 2)
        os.kill(kubelet, signal.SIGSTOP)
        try:
            said = {}
            for verb in (["status"], ["logs", "--tail", "5"], ["stacks"]):
                began = time.monotonic()
                result = cli(verb[0], name, "-n", namespace, *verb[1:], "--request-timeout", f"{DEADLINE}s",
                             check=False, timeout=DEADLINE + 60)
                took = time.monotonic() - began
                said[verb[0]] = (took, result.returncode, result.stdout + result.stderr)
        finally:
            os.kill(kubelet, signal.SIGCONT)
        for verb, (took, _, text) in said.items():
            assert f"the kubelet of node {real.NODE_NAME} did not answer" in text, (verb, text)
            assert f"no answer within {DEADLINE} s" in text or f"no logs within {DEADLINE} s" in text, (verb, text)
            assert took < DEADLINE + SLACK, (verb, took, text)
        assert said["status"][1] == 0, said  # the rest of what it shows is still shown
        assert said["logs"][1] == 3, said  # a replica's logs could not be read (docs/cluster.md's exit codes)
        last = said["logs"][2].rstrip().splitlines()[-1]
        assert re.fullmatch(r"error: no logs of [\w-]+: node down or kubelet not answering", last), said["logs"]
        print({verb: round(took, 1) for verb, (took, _, _) in said.items()})
    finally:
        cli("delete", name, "-n", namespace, check=False)
