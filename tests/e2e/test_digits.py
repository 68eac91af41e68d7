"""Scenarios on the real node, driven through the CLI: the digits example as a PyTorchJob."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubetrain.metrics import parse_metrics_line
from tests.testenv import node as real

from .conftest import Cli

pytestmark = [pytest.mark.slow, pytest.mark.torch]
ACCURACY = 0.97


def _metrics(text: str, kind: str) -> list[dict[str, object]]:
    records = (parse_metrics_line(line) for line in text.splitlines())
    return [r for r in records if r is not None and r.get("kind") == kind]


def test_submit_follow_trains_digits_on_the_real_node(cli: Cli, image: str, project: Path, namespace: str,
                                                     claim: Path) -> None:
    """a: submit --follow of the 2-node gloo job, then status, logs, events and delete on the same job."""
    spec = str(project / "kubetrain.yaml")
    run = cli("submit", "-f", spec, "-n", namespace, "--image", image, "--follow", "--timeout", "900", timeout=960)
    assert "Succeeded" in run.stderr.splitlines()[-1], run.stderr[-2000:]
    # --follow renders the metrics (progress lines and a summary on stderr); `logs` keeps them (data)
    assert "KUBETRAIN_METRICS" not in run.stdout and "training summary" in run.stderr, run.stderr[-2000:]
    logged = cli("logs", "digits-ddp", "-n", namespace).stdout
    evals = _metrics(logged, "eval")
    assert evals, logged[-2000:]
    assert float(str(evals[-1]["eval_accuracy"])) >= ACCURACY, evals[-1]
    # Both replicas joined (rank 0 reports for the group; the worker prints nothing of its own).
    assert [r["world_size"] for r in _metrics(logged, "start")] == [2], logged[:2000]
    checkpoints = sorted(p.name for p in (claim / "digits").iterdir())
    assert checkpoints, f"no checkpoint in the claim's directory {claim}"

    status = cli("status", "digits-ddp", "-n", namespace)
    assert f"{namespace}/digits-ddp: Succeeded" in status.stdout, status.stdout
    # Both pods ran on the real node (the Pods table; events may name the node too).
    pod_rows = [line for line in status.stdout.splitlines() if line.startswith(("master-", "worker-"))]
    assert len(pod_rows) == 2 and all(real.NODE_NAME in row for row in pod_rows), status.stdout
    logs = cli("logs", "digits-ddp", "-n", namespace)
    assert _metrics(logs.stdout, "end"), logs.stdout[-2000:]
    events = cli("events", "digits-ddp", "-n", namespace)
    assert "digits-ddp" in events.stdout + events.stderr
    cli("delete", "digits-ddp", "-n", namespace, "--wait", "--timeout", "120")
    gone = cli("status", "digits-ddp", "-n", namespace, check=False)
    assert gone.returncode != 0


def test_plain_script_job_runs_code_from_the_configmap(cli: Cli, image: str, project: Path, namespace: str,
                                                       claim: Path) -> None:
    """e: `command: [python, train_ddp.py]`, the script coming from the code ConfigMap, not the image."""
    # The image was built from the unchanged script; this line exists only in the ConfigMap's copy.
    script = project / "train_ddp.py"
    original = script.read_text()
    script.write_text(original + '\nprint("served from the code ConfigMap", flush=True)\n')
    spec = yaml.safe_load((project / "kubetrain-script.yaml").read_text())
    spec["spec"]["args"] = ["--epochs", "1", "--out", "/ckpt/digits-script/model.pt"]  # what is checked: the code
    path = project / "kubetrain-script-short.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    try:
        run = cli("submit", "-f", str(path), "-n", namespace, "--image", image, "--follow", "--timeout", "900",
                  timeout=960)
    finally:
        script.write_text(original)
    assert "Succeeded" in run.stderr.splitlines()[-1], run.stderr[-2000:]
    assert run.stdout.count("served from the code ConfigMap") == 2, run.stdout[-2000:]  # one per pod
    assert (claim / "digits-script" / "model.pt").is_file()


def test_elastic_workers_only_job_trains_to_completion(cli: Cli, image: str, project: Path, namespace: str,
                                                       claim: Path) -> None:
    """c: `elastic` renders workers only with a c10d rendezvous (torchrun's own, at worker-0's Service)."""
    spec = yaml.safe_load((project / "kubetrain.yaml").read_text())
    spec["metadata"]["name"] = "digits-elastic"
    spec["spec"]["elastic"] = {"minNodes": 1, "maxNodes": 2}
    spec["spec"]["checkpoint"]["dir"] = "/ckpt/digits-elastic"
    spec["spec"]["train"]["epochs"] = 1  # what is checked: the rendezvous of both workers, and an end
    path = project / "digits-elastic.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    run = cli("submit", "-f", str(path), "-n", namespace, "--image", image, "--follow", "--timeout", "600",
              timeout=660)
    assert "Succeeded" in run.stderr.splitlines()[-1], run.stderr[-2000:]
    # Both pods joined the rendezvous (the second within torchrun's 30 s last call after the first). The
    # metrics lines are in the pods' logs (--follow shows them as the progress line, not as JSON).
    logged = cli("logs", "digits-elastic", "-n", namespace).stdout
    assert [r["world_size"] for r in _metrics(logged, "start")] == [2], logged[:2000]
    assert _metrics(logged, "end"), logged[-2000:]
    status = cli("status", "digits-elastic", "-n", namespace)
    pod_rows = [line for line in status.stdout.splitlines() if line.startswith(("master-", "worker-"))]
    assert [row.split()[0] for row in pod_rows] == ["worker-0", "worker-1"], status.stdout
    assert sorted(p.name for p in (claim / "digits-elastic").glob("step-*.pt")), "no checkpoint"
