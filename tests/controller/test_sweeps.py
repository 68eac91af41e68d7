"""A Sweep run by the controller on the real control plane (kwok pods; the controller as its own process under
the manifests' RBAC): trials up to parallelism, a finished trial's objective read and the next trial created, a
controller killed mid-sweep that loses and duplicates nothing, a pruned trial's TrainingJob deleted,
`kubetrain sweep stop` leaving no trial, pod, Service or ConfigMap behind, and the best trial promoted from the
Sweep's status (`sweep best NAME --promote`, kubetrain.api.sweep_promote) once one completed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from click.testing import CliRunner

import kubetrain.api as kt
from kubetrain.cli.main import cli
from kubetrain.jobspec.load import load_spec
from kubetrain.metrics import format_metrics
from tests.controller.operator_env import GROUP, VERSION, custom, training_job
from tests.harness.helpers import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def sweep_body(name: str, namespace: str) -> dict[str, Any]:
    trial = training_job(name, namespace, nodes=1)["spec"]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": name, "namespace": namespace},
            "spec": {"parameters": [{"name": "width", "choice": [1, 2, 3, 4, 5], "env": "WIDTH"}],
                     "objective": {"metric": "acc", "goal": "max"}, "search": {"algorithm": "grid"},
                     "trials": 5, "parallelism": 2,
                     "earlyStopping": {"rule": "median", "minTrials": 1, "warmupSteps": 0}, "trial": trial}}


def trial_names(k8s: Any, namespace: str, name: str, terminating: bool = False) -> list[str]:
    """The Sweep's trial TrainingJobs; with `terminating`, also those being deleted (foreground deletion keeps a
    pruned trial's object until its pods are gone, and `kubetrain list` still counts it)."""
    items = custom(k8s).list_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs",
                                                      label_selector=f"kubetrain.dev/sweep={name}")["items"]
    return sorted(t["metadata"]["name"] for t in items if terminating or not t["metadata"].get("deletionTimestamp"))


def sweep_obj(k8s: Any, namespace: str, name: str) -> dict[str, Any]:
    return custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps", name)  # type: ignore


def trials_in_state(k8s: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return list(((sweep_obj(k8s, namespace, name).get("status") or {}).get("state") or {}).get("trials") or [])


def running_pod(k8s: Any, namespace: str, pod: str) -> bool:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_pod(namespace).items
    return any(p.metadata.name == pod and p.status.phase == "Running" for p in items)


def objective_step(k8s: Any, namespace: str, trial: str) -> int | None:
    """The step of the objective's last value in a trial's TrainingJob status (the controller read it)."""
    obj = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs", trial)
    return ((obj.get("status") or {}).get("objective") or {}).get("step")  # type: ignore[no-any-return]


def metrics(values: dict[int, float]) -> list[str]:
    """A training line and an eval line (the objective, acc) per step."""
    return [line for step, value in values.items() for line in (
        format_metrics("train", rank=0, step=step, total_steps=20, loss=1.0 / step, time=1000.0 + step),
        format_metrics("eval", rank=0, step=step, acc=value, time=1000.5 + step))]


def promote(kubeconfig: Path, namespace: str, out: Path, *flags: str) -> Any:
    return CliRunner(env={"KUBECONFIG": str(kubeconfig)}).invoke(
        cli, ["sweep", "best", "sw", "-n", namespace, "--promote", str(out), *flags], catch_exceptions=False)


def test_a_sweep_in_the_cluster_restarts_prunes_and_stops_clean(controlplane, k8s, namespace, start, tmp_path):
    first = start(name="first")
    created = custom(k8s).create_namespaced_custom_object(GROUP, VERSION, namespace, "sweeps",
                                                          sweep_body("sw", namespace))
    early = promote(controlplane.kubeconfig, namespace, tmp_path / "best.yaml")
    assert early.exit_code == 1 and early.output.count("\n") == 1, early.output
    assert early.output.startswith(f"error: Sweep {namespace}/sw: no trial has completed yet ("), early.output
    assert wait_for(lambda: (n := trial_names(k8s, namespace, "sw")) == ["sw-t0", "sw-t1"] and n,
                    "2 trials (parallelism 2)", 60)
    t0 = custom(k8s).get_namespaced_custom_object(GROUP, VERSION, namespace, "trainingjobs", "sw-t0")
    ref = t0["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("Sweep", created["metadata"]["uid"], True)
    assert t0["spec"]["env"]["WIDTH"] == "1"

    # Trial 0 reports its objective and ends: its last value is its result, and trial 2 starts.
    wait_for(lambda: running_pod(k8s, namespace, "sw-t0-master-0"), "trial 0's pod Running", 90)
    controlplane.set_pod_logs(namespace, "sw-t0-master-0", metrics({10: 0.5, 20: 0.9}))
    wait_for(lambda: objective_step(k8s, namespace, "sw-t0") == 20, "trial 0's objective in its status", 60)
    controlplane.set_pod_phase(namespace, "sw-t0-master-0", "Succeeded")
    done = wait_for(lambda: (t := trials_in_state(k8s, namespace, "sw")) and t[0]["state"] == "complete" and t,
                    "trial 0 complete in the Sweep's state", 90)
    assert done[0]["value"] == 0.9 and done[0]["intermediate"] == [[10, 0.5], [20, 0.9]]
    assert wait_for(lambda: "sw-t2" in (n := trial_names(k8s, namespace, "sw")) and n, "trial 2", 60) == [
        "sw-t0", "sw-t1", "sw-t2"]

    # The controller dies (SIGKILL); its successor makes the next decisions from the Sweep's status alone.
    first.kill()
    start(name="second")
    wait_for(lambda: running_pod(k8s, namespace, "sw-t1-master-0"), "trial 1's pod Running", 90)
    controlplane.set_pod_logs(namespace, "sw-t1-master-0", metrics({10: 0.1}))  # below trial 0's 0.5 at step 10
    pruned = wait_for(lambda: (t := trials_in_state(k8s, namespace, "sw")) and t[1]["state"] == "pruned" and t,
                      "trial 1 pruned", 90)
    assert [t["number"] for t in pruned] == list(range(len(pruned)))  # no trial twice
    wait_for(lambda: not running_pod(k8s, namespace, "sw-t1-master-0") and "sw-t1" not in trial_names(
        k8s, namespace, "sw", terminating=True), "the pruned trial's TrainingJob and pod deleted", 120)
    names = wait_for(lambda: (n := trial_names(k8s, namespace, "sw")) == ["sw-t0", "sw-t2", "sw-t3"] and n,
                     "trial 3 in trial 1's place", 60)
    assert [t["number"] for t in trials_in_state(k8s, namespace, "sw")] == [0, 1, 2, 3], names

    table = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)}).invoke(
        cli, ["sweep", "status", "sw", "-n", namespace], catch_exceptions=False)
    assert table.exit_code == 0, table.output
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[1:] if line[:1].isdigit()}
    assert rows["0"][2:5] == ["complete", "20/20", "0.9"] and rows["1"][2] == "pruned", table.stdout

    listed = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)}).invoke(
        cli, ["list", "-n", namespace], catch_exceptions=False)
    assert listed.exit_code == 0, listed.output
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["sweep/sw"], listed.stdout
    assert "3 trials:" in listed.stdout, listed.stdout

    stopped = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)}).invoke(
        cli, ["sweep", "stop", "sw", "-n", namespace, "--timeout", "120"], catch_exceptions=False)
    assert stopped.exit_code == 0, stopped.output
    core = kubernetes.client.CoreV1Api(k8s)
    assert trial_names(k8s, namespace, "sw") == []
    wait_for(lambda: not core.list_namespaced_pod(namespace).items and not core.list_namespaced_service(
        namespace).items, "no pod or Service left", 120)
    assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == ["kube-root-ca.crt"]
    final = wait_for(lambda: (o := sweep_obj(k8s, namespace, "sw"))["status"]["phase"] == "Stopped" and o,
                     "the Sweep Stopped", 60)
    states = [t["state"] for t in final["status"]["state"]["trials"]]
    assert states[:2] == ["complete", "pruned"] and set(states[2:]) == {"stopped"}, states
    assert trial_names(k8s, namespace, "sw") == []  # the controller created no trial after the stop

    check_promoted(controlplane.kubeconfig, namespace, tmp_path)


def check_promoted(kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    """The winner (trial 0), from the Sweep's status alone (its trials' TrainingJobs are gone): a plain spec."""
    out = tmp_path / "best.yaml"
    promoted = promote(kubeconfig, namespace, out)
    assert promoted.exit_code == 0, promoted.output
    spec = yaml.safe_load(out.read_text())
    assert "sweep" not in spec and spec["metadata"]["name"] == "sw" and spec["spec"]["env"]["WIDTH"] == "1"
    assert load_spec(str(out)).job.sweep is None
    kept = promote(kubeconfig, namespace, out)
    assert (kept.exit_code, kept.output) == (2, f"error: {out} already exists (use --force to overwrite)\n")
    assert promote(kubeconfig, namespace, out, "--force").exit_code == 0
    connection = kt.connect(kubeconfig=str(kubeconfig))
    assert kt.sweep_promote(name="sw", namespace=namespace, connection=connection) == out.read_text()
    best = kt.sweep_best(name="sw", namespace=namespace, connection=connection)
    assert best is not None and (best.number, best.value) == (0, 0.9)
