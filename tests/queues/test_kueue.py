"""kubetrain under a real Kueue (v0.19.2, tests/testenv/kueue.py): admission of PyTorchJobs and TrainJobs,
a job over quota left pending, preflight's quota verdicts, and gang admission with waitForPodsReady.

The queues (tests/testenv/kueue.py): ClusterQueues team-a (8 GPUs, may borrow 8) and team-b (8 GPUs, never
borrows, lends all 8) in cohort `gpus`, one ResourceFlavor `h100` for the kwok nodes' accelerator label,
and a LocalQueue per ClusterQueue (same names) in each test's namespace.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from click.testing import CliRunner, Result

from kubetrain.cli.main import cli
from kubetrain.kube.connection import connect
from tests.testenv import kueue as harness
from tests.testenv.dradriver import FAKE_DRIVER, fake_devices
from tests.testenv.polling import wait_for
from tests.testenv.specs import watch_until, write_spec

pytestmark = pytest.mark.controlplane
KUEUE = (harness.GROUP, harness.VERSION)


@pytest.fixture(autouse=True)
def empty_schema_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def queued(kueue: harness.Kueue, namespace: str) -> str:
    """The test's namespace, with LocalQueues team-a and team-b."""
    kueue.queues.add_local_queues(namespace)
    return namespace


@pytest.fixture
def kt(controlplane: Any) -> Any:
    def run(*args: str) -> Result:
        return CliRunner().invoke(cli, [*args, "--kubeconfig", str(controlplane.kubeconfig)], catch_exceptions=False)

    return run


def workload(controlplane: Any, namespace: str, job_uid: str) -> dict[str, Any] | None:
    custom = kubernetes.client.CustomObjectsApi(controlplane.api_client())
    items = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads",
                                                 label_selector=f"kueue.x-k8s.io/job-uid={job_uid}")["items"]
    return items[0] if items else None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


def pytorchjob(controlplane: Any, namespace: str, name: str) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(controlplane.api_client())
    return dict(custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name))


def job_pods(controlplane: Any, namespace: str, job: str) -> list[Any]:
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    return list(core.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={job}").items)


def _reserved_gpus(controlplane: Any, cluster_queue: str, resource: str = "nvidia.com/gpu") -> int:
    """`resource` reserved in the ClusterQueue's status (what preflight's "free now" is computed from)."""
    cq = kubernetes.client.CustomObjectsApi(controlplane.api_client()).get_cluster_custom_object(
        harness.GROUP, harness.VERSION, "clusterqueues", cluster_queue)
    return sum(int(str(r.get("total", "0"))) for flavor in (cq.get("status") or {}).get("flavorsReservation") or []
               for r in flavor.get("resources") or [] if r.get("name") == resource)


def admitted(controlplane: Any, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    uid = job["metadata"]["uid"]
    return dict(watch_until(lambda: (wl := workload(controlplane, namespace, uid)) and
                            (condition(wl, "Admitted") or {}).get("status") == "True" and wl, 60))


def test_pytorchjob_admitted_then_one_over_quota_stays_pending(controlplane: Any, kt: Any, queued: str,
                                                                tmp_path: Path) -> None:
    first = kt("submit", "-f", str(write_spec(tmp_path, "first", nodes=1, scheduling={"queue": "team-b"})),
               "-n", queued)
    assert first.exit_code == 0, first.stderr
    assert "✓ queue: LocalQueue team-b → ClusterQueue team-b: quota for 8 nvidia.com/gpu free now" in first.stderr
    job = pytorchjob(controlplane, queued, "first")
    wl = admitted(controlplane, queued, job)
    assert wl["status"]["admission"]["clusterQueue"] == "team-b"
    # Kueue unsuspended it (its webhook had suspended it at create), and put the flavor's node labels in.
    watch_until(lambda: not pytorchjob(controlplane, queued, "first")["spec"]["runPolicy"].get("suspend"), 30)
    # ... and the admitted job runs: its pod Running on a node of the flavor (Kueue's nodeSelector).
    pod = watch_until(lambda: [p for p in job_pods(controlplane, queued, "first")
                               if p.status.phase == "Running"], 60)[0]
    assert pod.spec.node_selector["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    status = kt("status", "first", "-n", queued)
    assert "→ Kueue: admitted by ClusterQueue team-b (LocalQueue team-b)" in status.stdout

    # team-b never borrows: a second 8-GPU job waits. Preflight says so (a warning, not a refusal). Kueue
    # updates the ClusterQueue's reservation a moment after it admits: wait for it, as preflight reads it.
    watch_until(lambda: _reserved_gpus(controlplane, "team-b") >= 8, 30)
    second = kt("submit", "-f", str(write_spec(tmp_path, "second", nodes=1, scheduling={"queue": "team-b"})),
                "-n", queued)
    assert second.exit_code == 0, second.stderr
    assert "! queue: will wait in LocalQueue team-b → ClusterQueue team-b: needs 8 nvidia.com/gpu, 0 free now" \
        in second.stderr
    uid = pytorchjob(controlplane, queued, "second")["metadata"]["uid"]
    pending = watch_until(lambda: (c := condition(workload(controlplane, queued, uid), "QuotaReserved"))
                          and c["status"] == "False" and "insufficient" in c["message"] and c, 30)
    assert pytorchjob(controlplane, queued, "second")["spec"]["runPolicy"]["suspend"] is True
    assert job_pods(controlplane, queued, "second") == []  # suspended: no pod holds GPUs outside the quota
    status = kt("status", "second", "-n", queued)
    assert f"→ Kueue: pending in LocalQueue team-b, position 1: {pending['message']}" in status.stdout
    listing = {j["name"]: j for j in json.loads(kt("list", "-n", queued, "-o", "json").stdout)}
    assert (listing["first"]["kueue"], listing["second"]["kueue"]) == ("admitted", "pending #1")
    assert "Suspended (Kueue: pending #1)" in kt("list", "-n", queued).stdout or \
        "Pending (Kueue: pending #1)" in kt("list", "-n", queued).stdout


def test_never_fits_the_quota_or_no_such_queue_is_refused(controlplane: Any, kt: Any, queued: str,
                                                           tmp_path: Path) -> None:
    # 3 × 8 GPUs: team-b can get at most 8, team-a 16 (8 nominal + 8 borrowing limit).
    for queue, most in (("team-b", "8"), ("team-a", "16")):
        result = kt("submit", "-f", str(write_spec(tmp_path, f"big-{queue}", nodes=3, scheduling={"queue": queue})),
                    "-n", queued)
        assert result.exit_code != 0
        assert (f"✗ queue: needs 24 nvidia.com/gpu but LocalQueue {queue} → ClusterQueue {queue} can get at most "
                f"{most} (flavor h100: 8 nominal + {int(most) - 8} borrowable") in result.stderr
        assert "Traceback" not in result.stderr
    missing = kt("submit", "-f", str(write_spec(tmp_path, "lost", nodes=1, scheduling={"queue": "nope"})),
                 "-n", queued)
    assert missing.exit_code != 0
    assert f"✗ queue: LocalQueue nope not found in namespace {queued}" in missing.stderr
    custom = kubernetes.client.CustomObjectsApi(controlplane.api_client())
    assert custom.list_namespaced_custom_object("kubeflow.org", "v1", queued, "pytorchjobs")["items"] == []


def test_trainjob_admitted_gets_pods_and_succeeds(controlplane: Any, kt: Any, queued: str, tmp_path: Path) -> None:
    # Not only admitted and unsuspended: Kueue 0.19.2 (built against Trainer 2.2's API) rewrites the TrainJob
    # on admission and drops what 2.2 does not know; the Trainer's JobSet update must still be accepted, pods
    # created, and the job run to its end.
    spec = write_spec(tmp_path, "tj", nodes=2, gpus=4, target="trainjob", scheduling={"queue": "team-a"})
    result = kt("submit", "-f", str(spec), "-n", queued)
    assert result.exit_code == 0, result.stderr
    custom = kubernetes.client.CustomObjectsApi(controlplane.api_client())
    core = kubernetes.client.CoreV1Api(controlplane.api_client())

    def trainjob() -> dict[str, Any]:
        return dict(custom.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", queued, "trainjobs", "tj"))

    wl = admitted(controlplane, queued, trainjob())
    assert wl["status"]["admission"]["clusterQueue"] == "team-a"
    watch_until(lambda: trainjob()["spec"].get("suspend") is False, 30)

    def running() -> list[Any]:
        pods = core.list_namespaced_pod(queued, label_selector="jobset.sigs.k8s.io/jobset-name=tj").items
        return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else []

    pods = watch_until(running, 60)
    # The flavor's node labels reached the pods (Kueue's runtime patch), and so did kubetrain's own.
    assert all(p.spec.node_selector.get("cloud.google.com/gke-accelerator") == "nvidia-h100-80gb" for p in pods)
    assert "→ Kueue: admitted by ClusterQueue team-a (LocalQueue team-a)" in kt("status", "tj", "-n", queued).stdout
    for pod in pods:
        controlplane.set_pod_phase(queued, pod.metadata.name, "Succeeded")
    watch_until(lambda: (condition(trainjob(), "Complete") or {}).get("status") == "True", 60)
    assert f"{queued}/tj: Succeeded" in kt("status", "tj", "-n", queued).stdout


def test_cpu_job_on_a_queue_without_gpu_quota(controlplane: Any, kt: Any, queued: str, tmp_path: Path) -> None:
    # The CPU ClusterQueue covers cpu and memory only: a CPU job is judged on its CPUs, not refused for GPUs.
    spec = write_spec(tmp_path, "cpujob", nodes=2, gpus=0, resources={"cpu": "2"}, scheduling={"queue": "cpu"})
    result = kt("submit", "-f", str(spec), "-n", queued, "--dry-run=server")
    assert result.exit_code == 0, result.stderr
    assert "✓ queue: LocalQueue cpu → ClusterQueue cpu: quota for 4 cpu free now (flavor cpu-any: 8 nominal" \
        in result.stderr
    # More CPUs than the ClusterQueue ever has: refused, naming the CPUs; the one check can be skipped alone.
    big = write_spec(tmp_path, "bigcpu", nodes=3, gpus=0, resources={"cpu": "4"}, scheduling={"queue": "cpu"})
    refused = kt("submit", "-f", str(big), "-n", queued, "--dry-run=server")
    assert refused.exit_code == 1
    assert "✗ queue: needs 12 cpu but LocalQueue cpu → ClusterQueue cpu can get at most 8" in refused.stderr
    assert refused.stderr.splitlines()[-1].endswith("or --skip-preflight=queue to submit anyway")
    skipped = kt("submit", "-f", str(big), "-n", queued, "--dry-run=server", "--skip-preflight=queue")
    assert skipped.exit_code == 0, skipped.stderr
    assert "! queue: not checked (--skip-preflight=queue)" in skipped.stderr
    assert "✓ namespace:" in skipped.stderr  # the other checks still ran


def test_gang_not_ready_in_time_is_evicted_and_requeued(controlplane: Any, kt: Any, queued: str,
                                                        tmp_path: Path) -> None:
    # Both pods are held in ContainerCreating (never Ready): after waitForPodsReady's timeout Kueue evicts the
    # whole job (reason PodsReadyTimeout), suspends it again and requeues it.
    # team-b, 2 × 4 GPUs: within its nominal quota whatever earlier tests' TrainJobs still hold of team-a's.
    spec = write_spec(tmp_path, "gang", nodes=2, gpus=4, scheduling={"queue": "team-b"})
    spec.write_text(spec.read_text().replace("metadata:\n  name: gang", "metadata:\n  annotations:\n"
                                             "    kubetrain.test/phase: Pending\n  name: gang"))
    result = kt("submit", "-f", str(spec), "-n", queued)
    assert result.exit_code == 0, result.stderr
    uid = pytorchjob(controlplane, queued, "gang")["metadata"]["uid"]
    # Pods exist (on nodes, held before Ready): the eviction is about readiness, not about missing pods.
    watch_until(lambda: len([p for p in job_pods(controlplane, queued, "gang") if p.spec.node_name]) == 2, 60)
    evicted = watch_until(lambda: (c := condition(workload(controlplane, queued, uid), "Evicted"))
                          and c["status"] == "True" and c, harness.PODS_READY_TIMEOUT_S + 60)
    assert evicted["reason"] == "PodsReadyTimeout"
    watch_until(lambda: ((workload(controlplane, queued, uid) or {}).get("status", {}).get("requeueState") or {})
                .get("count"), 60)
    status = watch_until(lambda: "PodsReadyTimeout" in (out := kt("status", "gang", "-n", queued).stdout) and out, 30)
    assert "→ Kueue: " in status and ("requeued" in status or "eviction" in status or "evicted" in status)


def _running_pods(controlplane: Any, namespace: str, job: str, count: int) -> list[Any]:
    def running() -> list[Any] | None:
        pods = [p for p in job_pods(controlplane, namespace, job) if p.status.phase == "Running"]
        return pods if len(pods) == count else None

    return list(watch_until(running, 60))


def _dra_spec(tmp_path: Path, name: str, nodes: int, count: int, device_class: str = FAKE_DRIVER) -> Path:
    path = write_spec(tmp_path, name, nodes=nodes, gpus=count, scheduling={"queue": harness.DRA_QUEUE})
    body = yaml.safe_load(path.read_text())
    body["spec"]["gpus"] = {"via": "dra", "deviceClass": device_class}
    path.write_text(yaml.safe_dump(body))
    return path


def test_kueue_counts_a_dra_jobs_devices_against_its_quota(controlplane: Any, kt: Any, queued: str,
                                                            tmp_path: Path) -> None:
    """ClusterQueue dra gives 4 devices of Kueue's resource for the DeviceClass (deviceClassMappings): a job of
    2 pods × 2 devices is admitted and runs; a 1-device job then waits, and preflight says both beforehand."""
    resource, rest = harness.DRA_RESOURCE, connect(kubeconfig=str(controlplane.kubeconfig)).rest
    with fake_devices(rest, {"gpu-node-0": "80Gi", "gpu-node-1": "80Gi"}):
        first = kt("submit", "-f", str(_dra_spec(tmp_path, "dra-first", 2, 2)), "-n", queued)
        assert first.exit_code == 0, first.stderr
        assert f"✓ queue: LocalQueue dra → ClusterQueue dra: quota for 4 {resource} free now" in first.stderr
        wl = admitted(controlplane, queued, pytorchjob(controlplane, queued, "dra-first"))
        usage = [a["resourceUsage"] for a in wl["status"]["admission"]["podSetAssignments"]]
        assert [u.get(resource) for u in usage] == ["2", "2"], usage
        running = _running_pods(controlplane, queued, "dra-first", 2)
        assert {p.spec.node_name for p in running} <= {"gpu-node-0", "gpu-node-1"}  # the nodes with the devices

        watch_until(lambda: _reserved_gpus(controlplane, harness.DRA_QUEUE, resource) >= 4, 30)
        second = kt("submit", "-f", str(_dra_spec(tmp_path, "dra-second", 1, 1)), "-n", queued)
        assert second.exit_code == 0, second.stderr
        assert f"! queue: will wait in LocalQueue dra → ClusterQueue dra: needs 1 {resource}, 0 free now" \
            in second.stderr
        uid = pytorchjob(controlplane, queued, "dra-second")["metadata"]["uid"]
        pending = watch_until(lambda: (c := condition(workload(controlplane, queued, uid), "QuotaReserved"))
                              and c["status"] == "False" and "insufficient" in c["message"] and c, 30)
        assert resource in pending["message"], pending
        assert job_pods(controlplane, queued, "dra-second") == []

        unmapped = kt("submit", "-f", str(_dra_spec(tmp_path, "dra-other", 1, 1, "gpu.other.test")), "-n", queued)
        assert unmapped.exit_code != 0
        assert "✗ queue: Kueue does not count DeviceClass gpu.other.test: no entry of resources.deviceClassMappings" \
            in unmapped.stderr
        for job in ("dra-first", "dra-second"):
            assert kt("delete", job, "-n", queued).exit_code == 0


def test_a_sweep_under_a_queue_runs_no_more_trials_than_its_quota_fits(controlplane: Any, queued: str,
                                                                        tmp_path: Path) -> None:
    from tests.controller.operator_env import GROUP, VERSION, custom, training_job
    from tests.controller.test_sweeps import metrics, objective_step, trial_names, trials_in_state
    from tests.queues.drills import start_controller

    # 4 trials, parallelism 4: the ClusterQueue cpu's 8 CPUs fit 2 trials of 3 CPUs, so the queue is the cap
    k8s = controlplane.api_client()
    trial = training_job("sq", queued, nodes=1, resources={"cpu": "3", "memory": "64Mi"}, scheduling={"queue": "cpu"})
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sweep", "metadata": {"name": "sq", "namespace": queued},
            "spec": {"parameters": [{"name": "width", "choice": [1, 2, 3, 4], "env": "WIDTH"}],
                     "objective": {"metric": "acc", "goal": "max"}, "search": {"algorithm": "grid"},
                     "trials": 4, "parallelism": 4, "trial": trial["spec"]}}
    controller = start_controller(controlplane, queued, tmp_path)
    core = kubernetes.client.CoreV1Api(k8s)
    seen: list[int] = []  # Running pods at each look

    def running() -> list[str]:
        pods = [p.metadata.name for p in core.list_namespaced_pod(queued).items if p.status.phase == "Running"]
        seen.append(len(pods))
        return pods

    try:
        custom(k8s).create_namespaced_custom_object(GROUP, VERSION, queued, "sweeps", body)
        watch_until(lambda: len(trial_names(k8s, queued, "sq")) == 4, 60)  # parallelism lets all 4 start ...
        watch_until(lambda: len(running()) == 2, 120)  # ... the quota runs 2
        ended: set[str] = set()
        while len(ended) < 4:  # each one ends, reporting its objective, and a waiting one runs
            pod = watch_until(lambda: next((p for p in running() if p not in ended), None), 120)
            controlplane.set_pod_logs(queued, pod, metrics({10: 0.5}))
            wait_for(partial(objective_step, k8s, queued, pod.removesuffix("-master-0")), f"{pod}'s objective", 60)
            controlplane.set_pod_phase(queued, pod, "Succeeded")
            ended.add(pod)
        done = watch_until(lambda: (t := trials_in_state(k8s, queued, "sq")) and all(
            x["state"] == "complete" for x in t) and t, 90)
        assert len(done) == 4 and max(seen) == 2, (done, seen)
    finally:
        controller.stop()
