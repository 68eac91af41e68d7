"""The operator against the real control plane: the controller runs as its own process under its
ServiceAccount's token (TokenRequest API) with exactly the RBAC of manifests/controller, never as admin.

Pods are kwok's: the training-operator creates them, kwok runs them, `set_pod_phase` ends them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

import kubetrain.api as kt
from kubetrain.controller.statusmodel import TrainingJobStatus
from kubetrain.errors import UsageError
from kubetrain.metrics import format_metrics
from tests.controller.operator_env import (
    GROUP,
    PLURAL,
    SA_NAMESPACE,
    VERSION,
    cond,
    create,
    custom,
    phase_is,
    pytorchjob,
    tj,
    training_job,
)
from tests.harness.helpers import wait_for

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def pods(k8s: Any, namespace: str, name: str, count: int) -> list[str] | None:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_pod(
        namespace, label_selector=f"training.kubeflow.org/job-name={name}").items
    names = sorted(p.metadata.name for p in items if p.status.phase == "Running")
    return names if len(names) == count else None


def events(k8s: Any, namespace: str, name: str) -> list[str]:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=TrainingJob").items
    return [e.reason for e in items]


def test_trainingjob_to_pytorchjob_to_pods_and_phase_through_succeeded(controlplane, k8s, namespace, start):
    op = start()
    created = create(k8s, training_job("ok", namespace))
    child = wait_for(lambda: pytorchjob(k8s, namespace, "ok"), "child PyTorchJob", 60)
    ref = child["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("TrainingJob", created["metadata"]["uid"], True)
    names = wait_for(lambda: pods(k8s, namespace, "ok", 2), "2 Running pods", 90)
    running = wait_for(lambda: phase_is(k8s, namespace, "ok", "Running"), "phase Running", 60)
    assert cond(running, "Valid")["status"] == "True" and cond(running, "Running")["status"] == "True"
    lines = [format_metrics("train", rank=0, step=s, total_steps=100, loss=1 / s, samples_per_s=64.0,
                            time=1000.0 + s) for s in (10, 20, 30)]
    controlplane.set_pod_logs(namespace, "ok-master-0", ["booting", *lines])
    tracked = wait_for(lambda: (o := tj(k8s, namespace, "ok")) and (o["status"].get("progress") or {}).get(
        "step") == 30 and o, "progress from the log tail", 60)
    progress = tracked["status"]["progress"]
    assert progress["stepText"] == "30/100" and progress["loss"] == "0.0333" and progress["eta"] == "1m10s"
    for pod in names:
        controlplane.set_pod_phase(namespace, pod, "Succeeded")
    done = wait_for(lambda: phase_is(k8s, namespace, "ok", "Succeeded"), "phase Succeeded", 90)
    status = done["status"]
    for written in (running, tracked, done):  # what the API server kept of each write is the model's
        TrainingJobStatus.model_validate(written["status"])
    assert status["observedGeneration"] == done["metadata"]["generation"]
    assert status["children"] == [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ok"}]
    assert status["completionTime"] and status["startTime"] and status["target"] == "pytorchjob"
    assert cond(done, "Succeeded")["status"] == "True"
    assert {"Created", "Running", "Succeeded"} <= set(wait_for(
        lambda: (e := events(k8s, namespace, "ok")) and "Succeeded" in e and e, "events", 30))
    assert op.proc.poll() is None, op.text()


def test_a_diverged_run_is_a_condition_an_event_and_in_kubetrain_status(controlplane, k8s, namespace, start):
    """A loss that turns NaN at step 8 (a plain script keeps printing NaN): status.progress says nan and where
    it diverged, the TrainingJob gets Diverged=True and a Warning Event, and `kubetrain status` of the child
    shows both (the progress line and the condition the controller mirrors)."""
    from click.testing import CliRunner

    from kubetrain.cli.main import cli

    start()
    create(k8s, training_job("nan", namespace, nodes=1))
    wait_for(lambda: pods(k8s, namespace, "nan", 1), "1 Running pod", 90)
    lines = [format_metrics("train", rank=0, step=s, total_steps=12, loss=1 / s if s < 8 else float("nan"),
                            samples_per_s=64.0, time=1000.0 + s) for s in range(1, 11)]
    controlplane.set_pod_logs(namespace, "nan-master-0", lines)
    def flagged() -> dict[str, Any] | None:
        obj = tj(k8s, namespace, "nan")
        found = [c for c in (obj or {}).get("status", {}).get("conditions") or [] if c["type"] == "Diverged"]
        return obj if found and found[0]["status"] == "True" else None

    diverged = wait_for(flagged, "the Diverged condition", 60)
    progress = diverged["status"]["progress"]
    assert (progress["loss"], progress["diverged"]) == ("nan", "diverged at step 8: loss nan")
    assert cond(diverged, "Diverged")["message"] == "diverged at step 8: loss nan"
    TrainingJobStatus.model_validate(diverged["status"])
    assert "Diverged" in wait_for(lambda: (e := events(k8s, namespace, "nan")) and "Diverged" in e and e,
                                  "the Diverged event", 30)
    runner = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)})
    shown = runner.invoke(cli, ["status", "nan", "-n", namespace], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert "Progress: step 10/12" in shown.stdout and "loss nan" in shown.stdout, shown.stdout
    assert "diverged at step 8: loss nan" in shown.stdout.split("Progress:", 1)[1].splitlines()[0]
    row = next(line for line in shown.stdout.splitlines() if line.startswith("Diverged"))
    assert "NonFiniteLoss" in row and "diverged at step 8: loss nan" in row


def test_failed_pods_fail_the_trainingjob(controlplane, k8s, namespace, start):
    start()
    create(k8s, training_job("boom", namespace, nodes=1, runPolicy={"restartPolicy": "Never", "backoffLimit": 0}))
    names = wait_for(lambda: pods(k8s, namespace, "boom", 1), "Running pod", 90)
    controlplane.set_pod_phase(namespace, names[0], "Failed")
    failed = wait_for(lambda: phase_is(k8s, namespace, "boom", "Failed"), "phase Failed", 90)
    assert cond(failed, "Failed")["status"] == "True" and cond(failed, "Failed")["message"]
    TrainingJobStatus.model_validate(failed["status"])
    # The replica counts are the child's, as the training-operator reports them.
    counts = pytorchjob(k8s, namespace, "boom")["status"]["replicaStatuses"]["Master"]
    assert failed["status"]["replicas"]["Master"] == {k: counts.get(k, 0) for k in ("active", "succeeded", "failed")}
    wait_for(lambda: "Failed" in events(k8s, namespace, "boom"), "a Failed Event", 30)


def test_invalid_object_gets_valid_false_with_the_clis_message(k8s, namespace, start):
    start()
    create(k8s, training_job("bad", namespace, nodes=2, command=[], elastic={"minNodes": 3, "maxNodes": 4}))
    bad = wait_for(lambda: phase_is(k8s, namespace, "bad", "Invalid"), "phase Invalid", 60)
    valid = cond(bad, "Valid")
    TrainingJobStatus.model_validate(bad["status"])
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert valid["message"] == ("spec.command: must not be empty; "
                                "spec.nodes: 2 must be between elastic.minNodes (3) and elastic.maxNodes (4)")
    assert pytorchjob(k8s, namespace, "bad") is None
    # A local code path cannot be resolved in the cluster: refused with a clear condition.
    create(k8s, training_job("local", namespace, code={"path": "./src"}))
    local = wait_for(lambda: phase_is(k8s, namespace, "local", "Invalid"), "local code refused", 60)
    assert cond(local, "Valid")["message"].startswith("spec.code.path: './src': a local directory cannot be read")


def _patch_spec(k8s: Any, namespace: str, name: str, spec: dict[str, Any], **annotations: str) -> None:
    body: dict[str, Any] = {"spec": spec}
    if annotations:
        body["metadata"] = {"annotations": annotations}
    custom(k8s).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)


def _metrics_lines(*steps: int, total: int = 100) -> list[str]:
    return [format_metrics("train", rank=0, step=s, total_steps=total, loss=1 / s, samples_per_s=64.0,
                           time=1000.0 + s) for s in steps]


def test_progress_is_read_once_more_when_the_job_ends(controlplane, k8s, namespace, start):
    # An hour between periodic reads: none happens during the test; what the status shows at the end is the
    # read made when the child finished.
    start("--progress-interval", "3600")
    create(k8s, training_job("last", namespace, nodes=1))
    pod = wait_for(lambda: pods(k8s, namespace, "last", 1), "Running pod", 90)[0]
    controlplane.set_pod_logs(namespace, pod, _metrics_lines(10, 50, 100))
    controlplane.set_pod_phase(namespace, pod, "Succeeded")
    done = wait_for(lambda: phase_is(k8s, namespace, "last", "Succeeded"), "phase Succeeded", 90)
    progress = wait_for(lambda: (tj(k8s, namespace, "last")["status"].get("progress")), "final progress", 30)
    assert progress["stepText"] == "100/100" and "eta" not in progress, progress
    assert progress["updateTime"] >= done["status"]["completionTime"]


def test_spec_update_is_reported_then_recreated_under_the_policy(controlplane, k8s, namespace, start):
    start()
    create(k8s, training_job("upd", namespace, nodes=1))
    first = wait_for(lambda: pytorchjob(k8s, namespace, "upd"), "child", 60)
    pod = wait_for(lambda: pods(k8s, namespace, "upd", 1), "Running pod", 90)[0]
    controlplane.set_pod_logs(namespace, pod, _metrics_lines(10, 30))
    wait_for(lambda: (tj(k8s, namespace, "upd")["status"].get("progress") or {}).get("step") == 30, "progress", 60)
    _patch_spec(k8s, namespace, "upd", {"image": "ghcr.io/example/train:2.0"})
    changed = wait_for(lambda: (o := tj(k8s, namespace, "upd")) and any(
        c["type"] == "SpecChanged" and c["status"] == "True" for c in (o.get("status") or {}).get("conditions", []))
        and o, "SpecChanged", 60)
    assert cond(changed, "SpecChanged")["reason"] == "NotApplied"
    assert pytorchjob(k8s, namespace, "upd")["metadata"]["uid"] == first["metadata"]["uid"]  # untouched
    _patch_spec(k8s, namespace, "upd", {}, **{"kubetrain.dev/update-policy": "recreate"})

    def recreated() -> dict[str, Any] | None:
        child = pytorchjob(k8s, namespace, "upd")
        return child if child and child["metadata"]["uid"] != first["metadata"]["uid"] else None

    child = wait_for(recreated, "recreated child", 120)
    image = child["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
    assert image == "ghcr.io/example/train:2.0"
    cleared = wait_for(lambda: (o := tj(k8s, namespace, "upd")) and all(
        c["type"] != "SpecChanged" for c in o["status"]["conditions"]) and o, "SpecChanged cleared", 60)
    # The old child's progress (step 30) is not the new child's: gone until the new one's pod reports (kwok
    # serves the same log for the pod of the same name: a read after the new child started is fine).
    progress = cleared["status"].get("progress")
    assert progress is None or progress["updateTime"] >= child["metadata"]["creationTimestamp"], cleared["status"]
    # Recreated is not the end: the new child's pod runs the new image, and the TrainingJob follows it.
    core = kubernetes.client.CoreV1Api(k8s)
    new_pod = wait_for(lambda: [p for p in core.list_namespaced_pod(
        namespace, label_selector="training.kubeflow.org/job-name=upd").items if p.status.phase == "Running"
        and any(r.uid == child["metadata"]["uid"] for r in p.metadata.owner_references or [])], "new pod", 90)[0]
    assert new_pod.spec.containers[0].image == "ghcr.io/example/train:2.0"
    controlplane.set_pod_phase(namespace, new_pod.metadata.name, "Succeeded")
    wait_for(lambda: phase_is(k8s, namespace, "upd", "Succeeded"), "phase Succeeded", 90)


def test_a_recreated_job_is_not_succeeded_until_its_new_child_is(controlplane, k8s, namespace, start):
    """`kubectl wait --for=condition=Succeeded` after a recreating update must wait for the new run: while the
    old child is deleted the phase is Pending (Recreating), not the old child's Succeeded (a real-node test
    read the logs of a new child that had not started, because the status still said Succeeded)."""
    start()
    create(k8s, training_job("again", namespace, nodes=1))
    first = wait_for(lambda: pytorchjob(k8s, namespace, "again"), "child", 60)
    pod = wait_for(lambda: pods(k8s, namespace, "again", 1), "Running pod", 90)[0]
    controlplane.set_pod_phase(namespace, pod, "Succeeded")
    wait_for(lambda: phase_is(k8s, namespace, "again", "Succeeded"), "phase Succeeded", 90)
    _patch_spec(k8s, namespace, "again", {"image": "ghcr.io/example/train:2.0"},
                **{"kubetrain.dev/update-policy": "recreate"})
    generation = tj(k8s, namespace, "again")["metadata"]["generation"]
    seen: list[tuple[Any, Any, bool]] = []
    core = kubernetes.client.CoreV1Api(k8s)

    def new_pod_running() -> bool:
        status = tj(k8s, namespace, "again").get("status") or {}
        child = pytorchjob(k8s, namespace, "again")
        fresh = child is not None and child["metadata"]["uid"] != first["metadata"]["uid"]
        seen.append((status.get("observedGeneration"), status.get("phase"), fresh))
        return fresh and any(p.status.phase == "Running" and any(
            r.uid == child["metadata"]["uid"] for r in p.metadata.owner_references or [])
            for p in core.list_namespaced_pod(namespace, label_selector="training.kubeflow.org/job-name=again").items)

    wait_for(new_pod_running, "the new child's pod Running", 120, interval=0.05)
    # Pending (SpecChanged, Recreating) while the old child goes: on kwok that can be shorter than one poll.
    assert any(s[0] == generation for s in seen), seen  # the new generation's status was seen, then:
    assert not [s for s in seen if s[0] == generation and s[1] == "Succeeded"], seen
    new_pod = pods(k8s, namespace, "again", 1)
    assert new_pod, "the new child's pod"
    controlplane.set_pod_phase(namespace, new_pod[0], "Succeeded")
    wait_for(lambda: phase_is(k8s, namespace, "again", "Succeeded"), "phase Succeeded again", 90)


def _checkpoint_dir_of(child: dict[str, Any]) -> str:
    """The checkpoint directory the child's pods train with (KUBETRAIN_CONFIG, read by kubetrain.runtime)."""
    container = child["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    config = next(e["value"] for e in container["env"] if e["name"] == "KUBETRAIN_CONFIG")
    return str(json.loads(config)["checkpoint"]["dir"])


def _recreated(k8s: Any, namespace: str, name: str, old: dict[str, Any]) -> dict[str, Any]:
    def new_child() -> dict[str, Any] | None:
        child = pytorchjob(k8s, namespace, name)
        return child if child and child["metadata"]["uid"] != old["metadata"]["uid"] else None

    return wait_for(new_child, "recreated child", 120)


def test_recreate_starts_fresh_and_continue_resumes_the_old_checkpoints(k8s, namespace, start):
    # recreate: the new child's pods checkpoint (and resume) in a directory of their own, so a changed spec
    # never resumes the old run's checkpoint; continue: the new child resumes from the old child's directory.
    start()
    train = {"model": "m:f", "dataset": "m:d", "epochs": 2}
    create(k8s, training_job("fresh", namespace, nodes=1, train=train,
                             volumes=[{"name": "ckpt", "claim": "ckpt", "mountPath": "/ckpt"}],
                             checkpoint={"dir": "/ckpt/fresh", "everySteps": 5}))
    first = wait_for(lambda: pytorchjob(k8s, namespace, "fresh"), "child", 60)
    assert _checkpoint_dir_of(first) == "/ckpt/fresh"
    # the child may exist before the controller's first status write
    wait_for(lambda: ((tj(k8s, namespace, "fresh") or {}).get("status") or {}).get("checkpointDir") == "/ckpt/fresh",
             "status.checkpointDir", 30)
    _patch_spec(k8s, namespace, "fresh", {"train": {**train, "epochs": 4}},
                **{"kubetrain.dev/update-policy": "recreate"})
    second = _recreated(k8s, namespace, "fresh", first)
    spec_hash = second["metadata"]["annotations"]["kubetrain.dev/spec-hash"]
    assert _checkpoint_dir_of(second) == f"/ckpt/fresh/run-{spec_hash}"
    status = wait_for(lambda: (o := tj(k8s, namespace, "fresh")) and all(
        c["type"] != "SpecChanged" for c in o["status"]["conditions"]) and o["status"], "recreated status", 60)
    assert status["checkpointDir"] == f"/ckpt/fresh/run-{spec_hash}", status
    recreating = [e for e in _event_messages(k8s, namespace, "fresh") if "recreate it" in e]
    assert recreating and recreating[0].endswith(f"starts fresh, checkpointing to /ckpt/fresh/run-{spec_hash})")

    _patch_spec(k8s, namespace, "fresh", {"train": {**train, "epochs": 6}},
                **{"kubetrain.dev/update-policy": "continue"})
    third = _recreated(k8s, namespace, "fresh", second)
    assert _checkpoint_dir_of(third) == f"/ckpt/fresh/run-{spec_hash}"  # where the second child checkpointed
    assert third["metadata"]["annotations"]["kubetrain.dev/spec-hash"] != spec_hash


def _event_messages(k8s: Any, namespace: str, name: str) -> list[str]:
    items = kubernetes.client.CoreV1Api(k8s).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=TrainingJob").items
    return [e.message for e in items]


def test_delete_cascades_to_the_child(k8s, namespace, start):
    start()
    create(k8s, training_job("gone", namespace, nodes=1))
    wait_for(lambda: pytorchjob(k8s, namespace, "gone"), "child", 60)
    custom(k8s).delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gone")
    # The garbage collector (kube-controller-manager) deletes the child; it re-discovers new CRDs every 30 s.
    wait_for(lambda: pytorchjob(k8s, namespace, "gone") is None, "child deleted by the GC", 120)


def test_killed_mid_burst_converges_without_duplicates(k8s, namespace, start):
    first = start("--workers", "1", name="first")
    count = 25
    for i in range(count):
        create(k8s, training_job(f"burst-{i}", namespace, nodes=1))
    wait_for(lambda: _children(k8s, namespace) >= 3, "a few children", 60, interval=0.05)
    first.kill()  # SIGKILL: no Lease release, no clean-up
    start(name="second")
    wait_for(lambda: _children(k8s, namespace) == count, f"{count} children", 120)
    objs = custom(k8s).list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"]
    owners = [o["metadata"]["ownerReferences"] for o in objs]
    assert len(objs) == count and all(len(refs) == 1 for refs in owners)
    uids = {t["metadata"]["uid"] for t in custom(k8s).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"]}
    assert {refs[0]["uid"] for refs in owners} == uids
    statused = lambda: sum(1 for t in custom(k8s).list_namespaced_custom_object(  # noqa: E731
        GROUP, VERSION, namespace, PLURAL)["items"] if (t.get("status") or {}).get("observedGeneration"))
    wait_for(lambda: statused() == count, "every status mirrored", 120)


def _children(k8s: Any, namespace: str) -> int:
    return len(custom(k8s).list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"])


def _holder(k8s: Any, namespace: str) -> str | None:
    try:
        lease = kubernetes.client.CoordinationV1Api(k8s).read_namespaced_lease(f"lease-{namespace}", SA_NAMESPACE)
    except ApiException:
        return None
    return lease.spec.holder_identity or None


def test_two_replicas_one_leader_and_failover(k8s, namespace, start):
    ops = {"a": start(name="a"), "b": start(name="b")}
    holder = wait_for(lambda: _holder(k8s, namespace), "a Lease holder", 60)
    leader, standby = (ops["a"], ops["b"]) if holder.startswith("a_") else (ops["b"], ops["a"])
    create(k8s, training_job("one", namespace, nodes=1))
    wait_for(lambda: pytorchjob(k8s, namespace, "one"), "child from the leader", 60)
    time.sleep(1)
    assert "caches synced" in leader.text() and "caches synced" not in standby.text()
    leader.kill()
    new = wait_for(lambda: (h := _holder(k8s, namespace)) and h != holder and h, "failover", 60)
    assert new.startswith(("a_", "b_")) and new.split("_")[0] != holder.split("_")[0]
    create(k8s, training_job("two", namespace, nodes=1))
    wait_for(lambda: pytorchjob(k8s, namespace, "two"), "child from the new leader", 60)
    assert standby.stop() == 0  # SIGTERM: clean exit, Lease released
    assert _holder(k8s, namespace) is None


def test_submit_hands_over_and_the_cluster_verbs_work_on_the_child(controlplane, k8s, namespace, start, tmp_path):
    from click.testing import CliRunner

    from kubetrain.cli.main import cli

    start()
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(yaml.safe_dump(training_job("handed", namespace, nodes=1)))
    runner = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)})
    result = runner.invoke(cli, ["submit", "--controller", "-f", str(spec)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout == "handed\n"
    owner = wait_for(lambda: tj(k8s, namespace, "handed"), "TrainingJob", 30)
    assert "status" not in yaml.safe_dump(owner["spec"]) and owner["spec"]["nodes"] == 1
    wait_for(lambda: pytorchjob(k8s, namespace, "handed"), "child from the controller", 60)
    wait_for(lambda: phase_is(k8s, namespace, "handed", "Running"), "Running", 90)
    status = runner.invoke(cli, ["status", "handed", "-n", namespace, "-o", "json"], catch_exceptions=False)
    assert status.exit_code == 0 and '"Running"' in status.stdout, status.output
    listing = runner.invoke(cli, ["list", "-n", namespace, "-o", "json"], catch_exceptions=False)
    assert '"handed"' in listing.stdout
    # A local code directory is resolved by submit: uploaded as the code ConfigMap, owned by the TrainingJob,
    # referenced from kubetrain.dev/code, and mounted by the child the controller renders.
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    code = tmp_path / "code.yaml"
    code.write_text(yaml.safe_dump(training_job("withcode", namespace, nodes=1, code={"path": "./src"})))
    handed = runner.invoke(cli, ["submit", "--controller", "-f", str(code)], catch_exceptions=False)
    assert handed.exit_code == 0, handed.output
    child = wait_for(lambda: pytorchjob(k8s, namespace, "withcode"), "child with code", 60)
    volumes = child["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
    configmap = next(v["configMap"] for v in volumes if v["name"] == "code")
    assert configmap["items"] == [{"key": "train.py", "path": "train.py"}]
    stored = kubernetes.client.CoreV1Api(k8s).read_namespaced_config_map(configmap["name"], namespace)
    assert stored.data == {"train.py": "print('hi')\n"}
    assert stored.metadata.owner_references[0].uid == tj(k8s, namespace, "withcode")["metadata"]["uid"]
    # `kubetrain delete` of the child goes through its TrainingJob: deleting only the child would have the
    # controller re-create it.
    deleted = runner.invoke(cli, ["delete", "handed", "-n", namespace], catch_exceptions=False)
    assert deleted.exit_code == 0, deleted.output
    assert f"TrainingJob {namespace}/handed deleted" in deleted.stderr
    wait_for(lambda: tj(k8s, namespace, "handed") is None, "TrainingJob deleted", 30)
    time.sleep(3)  # the controller would have re-created the child by now if it still owned one
    assert pytorchjob(k8s, namespace, "handed") is None


def test_the_python_api_hands_over_to_the_controller_as_submit_does(controlplane, k8s, namespace, start, tmp_path):
    start()
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(yaml.safe_dump(training_job("from-python", namespace, nodes=1)))
    kubeconfig = str(controlplane.kubeconfig)
    with pytest.raises(UsageError, match="dry_run must be"):
        kt.submit_to_controller(spec, namespace=namespace, kubeconfig=kubeconfig, dry_run="maybe")
    handed = kt.submit_to_controller(spec, namespace=namespace, kubeconfig=kubeconfig, image="example.com/t:2")
    assert (handed.namespace, handed.name) == (namespace, "from-python") and handed.object["metadata"]["uid"]
    assert tj(k8s, namespace, "from-python")["spec"]["image"] == "example.com/t:2"
    child = wait_for(lambda: pytorchjob(k8s, namespace, "from-python"), "child from the controller", 60)
    master = child["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert master["image"] == "example.com/t:2"


def _invoke_in_background(runner: Any, argv: list[str]) -> Any:
    """Run the CLI in a thread (it blocks in --wait/--follow while the test ends the pods); .result() waits."""
    from concurrent.futures import ThreadPoolExecutor

    from kubetrain.cli.main import cli

    pool = ThreadPoolExecutor(1)
    future = pool.submit(runner.invoke, cli, argv, catch_exceptions=False)
    pool.shutdown(wait=False)
    return future


def _end_pods(controlplane: Any, k8s: Any, namespace: str, name: str, phase: str) -> None:
    for pod in wait_for(lambda: pods(k8s, namespace, name, 1), f"{name}'s pod Running", 90):
        controlplane.set_pod_phase(namespace, pod, phase)


def test_submit_controller_honours_image_target_wait_follow_timeout(controlplane, k8s, namespace, start, tmp_path):
    from click.testing import CliRunner

    from kubetrain.cli.main import cli

    start()
    spec = tmp_path / "kubetrain.yaml"
    spec.write_text(yaml.safe_dump(training_job("flags", namespace, nodes=1)))
    runner = CliRunner(env={"KUBECONFIG": str(controlplane.kubeconfig)})
    submit = ["submit", "--controller", "-f", str(spec)]
    # What the controller cannot do is refused as a usage error, before anything is applied.
    refused = runner.invoke(cli, [*submit, "--replace"], catch_exceptions=False)
    assert refused.exit_code == 2 and "--replace cannot be combined with --controller" in refused.stderr
    dry = runner.invoke(cli, [*submit, "--target", "trainjob", "--image", "ghcr.io/example/train:3.0",
                              "--dry-run=client", "-o", "yaml"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    printed = yaml.safe_load(dry.stdout)
    assert (printed["spec"]["target"], printed["spec"]["image"]) == ("trainjob", "ghcr.io/example/train:3.0")
    assert tj(k8s, namespace, "flags") is None

    # --image reaches the TrainingJob and its child; --wait waits for the end: here --timeout (exit 4).
    waited = runner.invoke(cli, [*submit, "--image", "ghcr.io/example/train:2.0", "--wait", "--timeout", "4"],
                           catch_exceptions=False)
    assert waited.exit_code == 4, waited.output
    assert "timed out after" in waited.stderr
    assert tj(k8s, namespace, "flags")["spec"]["image"] == "ghcr.io/example/train:2.0"
    child = wait_for(lambda: pytorchjob(k8s, namespace, "flags"), "child", 60)
    assert child["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] == \
        "ghcr.io/example/train:2.0"
    # The same submit again, waiting while the pod succeeds: exit 0 once the TrainingJob is Succeeded.
    again = _invoke_in_background(runner, [*submit, "--image", "ghcr.io/example/train:2.0", "--wait"])
    _end_pods(controlplane, k8s, namespace, "flags", "Succeeded")
    done = again.result(timeout=120)
    assert done.exit_code == 0, done.output
    assert done.stderr.splitlines()[-1] == f"TrainingJob {namespace}/flags Succeeded"

    # --follow: the child's logs, then the TrainingJob's end; a failed job exits 1.
    spec.write_text(yaml.safe_dump(training_job("follow", namespace, nodes=1,
                                                runPolicy={"restartPolicy": "Never", "backoffLimit": 0})))
    followed = _invoke_in_background(runner, [*submit, "--follow", "--timeout", "120"])
    _end_pods(controlplane, k8s, namespace, "follow", "Failed")
    result = followed.result(timeout=150)
    assert result.exit_code == 1, result.output
    assert "training complete" in result.stdout  # kwok's log of the pod, followed
    assert result.stderr.splitlines()[-1].startswith(f"TrainingJob {namespace}/follow Failed")


def test_probes_listen_on_loopback_unless_told(namespace, start):
    import re
    import urllib.error
    import urllib.request

    def port_of(op: Any) -> tuple[str, str]:
        found = wait_for(lambda: re.search(r"/metrics on ([\d.]+):(\d+)", op.text()), "the probe address", 30)
        return found.group(1), found.group(2)

    host, port = port_of(start())
    assert host == "127.0.0.1"
    assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read() == b"ok\n"
    with pytest.raises(urllib.error.URLError):  # another local address: nothing listens there
        urllib.request.urlopen(f"http://127.0.0.2:{port}/healthz", timeout=5)
    host, port = port_of(start("--probe-address", "127.0.0.2", "--no-leader-elect", name="pod-ip"))
    assert host == "127.0.0.2"
    assert urllib.request.urlopen(f"http://127.0.0.2:{port}/metrics", timeout=5).read().startswith(b"kubetrain_")
