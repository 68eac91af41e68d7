"""Tier 3: the cluster verbs through click's CliRunner against the real control plane (tests/testenv)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from click.testing import CliRunner, Result

from kubetrain.cli.main import cli
from kubetrain.kube import watch
from tests.testenv.specs import watch_until, write_spec

pytestmark = pytest.mark.controlplane


@pytest.fixture(autouse=True)
def empty_schema_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `kubetrain schemas fetch` cache: submit validates with the cluster's CRD, or says it cannot."""
    monkeypatch.setenv("KUBETRAIN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def kt(controlplane: Any) -> Any:
    """Run `kubetrain ARGS...` with --kubeconfig pointing at the test control plane."""
    def run(*args: str, kubeconfig: Path | None = None) -> Result:
        argv = [*args, "--kubeconfig", str(kubeconfig or controlplane.kubeconfig)]
        return CliRunner().invoke(cli, argv, catch_exceptions=False)

    return run


def pods_of(controlplane: Any, namespace: str, job: str, count: int) -> list[dict[str, Any]]:
    def check(cache: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]] | None:
        running = [p for p in cache.values() if (p.get("status") or {}).get("phase") == "Running"]
        return running if len(running) >= count else None

    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    return watch.wait_for(core.list_namespaced_pod, check, timeout=60, what=f"{count} Running pods",
                          namespace=namespace, label_selector=f"training.kubeflow.org/job-name={job}")


def test_submit_wait_status_list_and_delete(controlplane: Any, kt: Any, namespace: str, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "ddp", nodes=2, code=True))

    def succeed_when_running() -> None:
        for pod in pods_of(controlplane, namespace, "ddp", 2):
            controlplane.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")

    helper = threading.Thread(target=succeed_when_running, daemon=True)
    helper.start()
    result = kt("submit", "-f", spec, "-n", namespace, "--wait", "--timeout", "60")
    helper.join(5)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "ddp\n"
    assert "✓ fit: 2 pod(s) × 8 nvidia.com/gpu fit" in result.stderr
    assert f"PyTorchJob {namespace}/ddp created" in result.stderr
    assert result.stderr.rstrip().endswith(f"PyTorchJob {namespace}/ddp Succeeded")

    status = kt("status", "ddp", "-n", namespace)
    assert status.exit_code == 0, status.stderr
    assert status.stdout.startswith(f"pytorchjob {namespace}/ddp: Succeeded (2×8 GPU, age ")
    assert "master-0" in status.stdout and "gpu-node-" in status.stdout and "Succeeded" in status.stdout
    as_json = json.loads(kt("status", "ddp", "-n", namespace, "-o", "json").stdout)
    assert as_json["state"] == "Succeeded" and {p["replica"] for p in as_json["pods"]} == {"master-0", "worker-0"}

    listing = kt("list", "-n", namespace)
    assert listing.stdout.splitlines()[0].split() == ["NAME", "TARGET", "STATE", "NODES×GPUS", "AGE"]
    assert listing.stdout.splitlines()[1].split()[:4] == ["ddp", "pytorchjob", "Succeeded", "2×8"]
    everywhere = json.loads(kt("list", "-A", "-o", "json").stdout)
    assert {"name": "ddp", "namespace": namespace, "state": "Succeeded"}.items() <= next(
        j for j in everywhere if j["namespace"] == namespace).items()

    deleted = kt("delete", "ddp", "-n", namespace, "--wait", "--timeout", "60")
    assert deleted.exit_code == 0, deleted.stderr
    assert f"PyTorchJob {namespace}/ddp: job and pods gone" in deleted.stderr
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    assert not core.list_namespaced_pod(namespace, label_selector="training.kubeflow.org/job-name=ddp").items
    watch.wait_for(core.list_namespaced_config_map, lambda cache: not cache, timeout=30, what="code ConfigMap gone",
                   namespace=namespace, label_selector="kubetrain.dev/job=ddp")
    missing = kt("status", "ddp", "-n", namespace)
    assert missing.exit_code == 1
    assert missing.stderr == f"error: no PyTorchJob named ddp in namespace {namespace} (list them: kubetrain list -n " \
                             f"{namespace})\n"


def owned_running(controlplane: Any, namespace: str, job: str, uid: str, count: int) -> list[Any]:
    """`count` Running pods of the job object `uid` (not of an earlier job of the same name)."""
    core = kubernetes.client.CoreV1Api(controlplane.api_client())

    def check() -> list[Any] | None:
        items = core.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={job}").items
        mine = [p for p in items if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                and any(ref.uid == uid for ref in p.metadata.owner_references or [])]
        return mine if len(mine) == count else None

    found: list[Any] = watch_until(check, 60)
    return found


def test_resubmit_is_a_noop_changed_needs_replace(controlplane: Any, kt: Any, namespace: str, tmp_path: Path
                                                  ) -> None:
    spec = str(write_spec(tmp_path, "again", nodes=1))
    assert kt("submit", "-f", spec, "-n", namespace, "-o", "name").stdout == "pytorchjob.kubeflow.org/again\n"
    again = kt("submit", "-f", spec, "-n", namespace)
    assert again.exit_code == 0 and again.stdout == "again\n"
    assert f"PyTorchJob {namespace}/again unchanged: same spec already submitted, nothing to do" in again.stderr

    changed = str(write_spec(tmp_path, "again", nodes=2))
    refused = kt("submit", "-f", changed, "-n", namespace)
    assert refused.exit_code == 1 and refused.stdout == ""
    assert refused.stderr.splitlines()[-1].startswith(f"error: PyTorchJob {namespace}/again already exists with a "
                                                      "different spec (spec hash ")
    assert "re-submit with --replace" in refused.stderr
    replaced = kt("submit", "-f", changed, "-n", namespace, "--replace", "-o", "yaml")
    assert replaced.exit_code == 0, replaced.stderr
    (job,) = yaml.safe_load_all(replaced.stdout)
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1 and job["metadata"]["uid"]
    assert f"PyTorchJob {namespace}/again replaced" in replaced.stderr
    # Replaced is not the end: the new job's two pods run.
    owned_running(controlplane, namespace, "again", job["metadata"]["uid"], 2)


def test_dry_runs_write_nothing(controlplane: Any, kt: Any, namespace: str, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "dry", nodes=1, code=True))
    server = kt("submit", "-f", spec, "-n", namespace, "--dry-run=server", "-o", "json")
    assert server.exit_code == 0, server.stderr
    items = json.loads(server.stdout)["items"]
    assert [i["kind"] for i in items] == ["ConfigMap", "PyTorchJob"] and items[1]["metadata"]["uid"]
    assert items[0]["metadata"]["ownerReferences"][0]["uid"] == items[1]["metadata"]["uid"]
    client_side = kt("submit", "-f", spec, "-n", namespace, "--dry-run=client", "-o", "yaml")
    assert client_side.exit_code == 0 and "(client dry run)" in client_side.stderr
    custom = kubernetes.client.CustomObjectsApi(controlplane.api_client())
    assert not custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"]


def test_wait_for_capacity_waits_for_busy_gpus_but_never_for_a_job_that_cannot_fit(
        controlplane: Any, kt: Any, namespace: str, tmp_path: Path) -> None:
    never = str(write_spec(tmp_path, "huge", nodes=2, gpus=16))  # 16 GPUs a pod: no node has more than 8
    refused = kt("submit", "-f", never, "-n", namespace, "--wait-for-capacity", "--timeout", "600")
    assert refused.exit_code == 1 and "preflight failed" in refused.stderr, refused.stderr
    assert "huge" not in refused.stdout
    hog = kt("submit", "-f", str(write_spec(tmp_path, "hog", nodes=3)), "-n", namespace, "--skip-fit")
    assert hog.exit_code == 0, hog.stderr
    hog_pods = pods_of(controlplane, namespace, "hog", 3)  # all 24 schedulable GPUs are now in use
    outcome: dict[str, Result] = {}
    second = str(write_spec(tmp_path, "second", nodes=1))
    waiter = threading.Thread(target=lambda: outcome.setdefault(
        "r", kt("submit", "-f", second, "-n", namespace, "--wait-for-capacity", "--timeout", "120")), daemon=True)
    waiter.start()
    waiter.join(8)
    assert waiter.is_alive(), outcome["r"].stderr  # still waiting for GPUs...
    custom = kubernetes.client.CustomObjectsApi(controlplane.api_client())
    names = [j["metadata"]["name"] for j in custom.list_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs")["items"]]
    assert names == ["hog"]  # ...and applied nothing yet
    for pod in hog_pods:
        controlplane.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")
    waiter.join(60)
    assert not waiter.is_alive(), "submit --wait-for-capacity did not proceed once the GPUs were free"
    result = outcome["r"]
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "second\n"
    assert "--wait-for-capacity: waiting" in result.stderr and "GPUs held by" in result.stderr
    pods_of(controlplane, namespace, "second", 1)  # and the job it waited to submit runs


def test_submit_prints_the_launcher_warnings(kt: Any, namespace: str, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "launch", nodes=2, command=["torchrun", "--nnodes=3", "train.py"]))
    result = kt("submit", "-f", spec, "-n", namespace, "--dry-run=client", "-o", "name")
    assert result.exit_code == 0, result.stderr
    assert "--nnodes=3" in result.stderr and "--nnodes=3" not in result.stdout


def test_preflight_failures_block_the_submit(kt: Any, namespace: str, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "refs", nodes=4, secretEnv=[{"name": "T", "secret": "hf", "key": "t"}]))
    result = kt("submit", "-f", spec, "-n", namespace)
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert f"✗ references: Secret hf not found in namespace {namespace} — create it: kubectl create secret " \
           f"generic hf -n {namespace} --from-literal=KEY=VALUE" in lines
    assert any(line.startswith("✗ fit: can never fit: 4 pods × 8 nvidia.com/gpu, but the eligible nodes hold at "
                               "most 3 such pod(s) even when idle") for line in lines)
    assert lines[-1] == ("error: preflight failed (2 check(s) marked ✗): fix them, or "
                         "--skip-preflight=fit,references to submit anyway")
    missing_ns = kt("submit", "-f", spec, "-n", "no-such-ns", "--skip-preflight")
    assert missing_ns.stderr == ("error: namespace no-such-ns does not exist: create it: kubectl create namespace "
                                 "no-such-ns\n") and missing_ns.exit_code == 1


def test_rbac_denial_for_a_restricted_user(controlplane: Any, kt: Any, namespace: str, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "r", nodes=1))
    restricted = controlplane.write_kubeconfig("carol", ("team-a",))
    result = kt("submit", "-f", spec, "-n", namespace, kubeconfig=restricted)
    assert result.exit_code == 1
    assert f"✗ permissions: not allowed to create pytorchjobs.kubeflow.org, get pytorchjobs.kubeflow.org in " \
           f"namespace {namespace}" in result.stderr
    skipped = kt("submit", "-f", spec, "-n", namespace, "--skip-preflight", kubeconfig=restricted)
    assert skipped.exit_code == 1 and skipped.stderr.count("error: ") == 1
    # carol may not read the CRD either, so validation says the server will check the schema.
    assert skipped.stderr.splitlines()[0] == "validate: no local schema for PyTorchJob; the API server validates it " \
                                             "on apply"
    assert skipped.stderr.splitlines()[1].startswith("error: forbidden: cannot get pytorchjobs.kubeflow.org r in "
                                                     "namespace ")
    assert 'User "carol" cannot get resource "pytorchjobs"' in skipped.stderr


def test_events_and_status_hints_from_the_real_scheduler(controlplane: Any, kt: Any, namespace: str,
                                                         tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "big", nodes=4))
    assert kt("submit", "-f", spec, "-n", namespace, "--skip-preflight").exit_code == 0
    pods_of(controlplane, namespace, "big", 3)

    def warned() -> Result | None:
        result = kt("events", "big", "-n", namespace)
        return result if "FailedScheduling" in result.stdout else None

    result = watch_until(warned)
    assert "→ not enough free nvidia.com/gpu" in result.stdout
    status = kt("status", "big", "-n", namespace)
    assert "Hints:\n  → not enough free nvidia.com/gpu" in status.stdout
    as_json = json.loads(kt("events", "big", "-n", namespace, "-o", "json").stdout)
    assert any(e["reason"] == "FailedScheduling" and e["hints"] for e in as_json)



def _post_event(core: Any, namespace: str, obj: dict[str, Any], reason: str, message: str, first: str,
                last: str | None = None, count: int = 1, kind: str = "Normal", field_path: str = "") -> None:
    """An Event as the kubelet or an operator writes it (core/v1, first/last timestamps and a count)."""
    meta = obj["metadata"]
    core.create_namespaced_event(namespace, {
        "metadata": {"generateName": f"{meta['name']}."}, "type": kind, "reason": reason, "message": message,
        "involvedObject": {"kind": obj["kind"], "apiVersion": obj["apiVersion"], "name": meta["name"],
                           "namespace": namespace, "uid": meta["uid"], **({"fieldPath": field_path} if field_path
                                                                          else {})},
        "firstTimestamp": first, "lastTimestamp": last or first, "count": count,
        "source": {"component": "kubelet"}})


def _stamp(seconds: float) -> str:
    import datetime as dt

    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_status_timeline_events_and_hints_say_what_happened_once(controlplane: Any, kt: Any, namespace: str,
                                                               tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "told", nodes=1, gpus=0))
    assert kt("submit", "-f", spec, "-n", namespace).exit_code == 0
    pod = pods_of(controlplane, namespace, "told", 1)[0]
    pod = {**pod, "kind": "Pod", "apiVersion": "v1"}
    core = kubernetes.client.CoreV1Api(controlplane.api_client())
    job = kubernetes.client.CustomObjectsApi(controlplane.api_client()).get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", "told")
    # The image came 2 s after the job; a restart 30 s later "pulls" it again (already present): not the start.
    container = "spec.containers{pytorch}"
    _post_event(core, namespace, pod, "Pulled", 'Successfully pulled image "x" in 1.9s', _stamp(2), _stamp(30),
                count=2, field_path=container)
    _post_event(core, namespace, pod, "Pulled", 'Container image "x" already present on machine', _stamp(60),
                field_path=container)
    # The kubelet's informer was not synced yet: it retries by itself, no hint.
    _post_event(core, namespace, pod, "FailedMount", 'MountVolume.SetUp failed for volume "code" : failed to sync '
                "configmap cache: timed out waiting for the condition", _stamp(1), kind="Warning")
    # An operator retrying a denied update: five Events, each with a dump of the whole object.
    for i in range(5):
        dump = "{" + ", ".join(f'Field{n}:"value-{i}-{n}"' for n in range(60)) + "}"
        _post_event(core, namespace, job, "FailedCreate", 'failed to apply JobSet: admission webhook "vjobset.kb.io" '
                    f"denied the request: spec.replicatedJobs: Invalid value: {dump}: field is immutable",
                    _stamp(3 + i), kind="Warning")
    status = kt("status", "told", "-n", namespace, "--events", "20").stdout
    timeline = status.split("Timeline: ", 1)[1]
    import re

    pulled = re.search(r"image pulled \+([\d.]+)s", timeline)
    assert pulled and float(pulled.group(1)) < 20, timeline  # the first pull, not the restart's (+30 s, +60 s)
    events = status.split("Recent events:", 1)[1].split("Hints:", 1)[0]
    assert max(len(line) for line in events.splitlines()) < 300, events
    denied = [line for line in events.splitlines() if "FailedCreate" in line]
    assert len(denied) == 1 and "(x5)" in denied[0], events
    assert "→" not in events  # the hints are listed once, below
    hints = status.split("Hints:", 1)[1].split("Timeline:", 1)[0]
    assert hints.count('admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs: field is '
                       "immutable") == 1, hints
    assert "configmap cache" not in hints and "volume could not be mounted" not in hints, hints


@pytest.mark.parametrize("verb", [["status", "x"], ["list"], ["events", "x"], ["delete", "x"], ["submit"]])
def test_unreachable_cluster_and_bad_context_are_one_line(controlplane: Any, kt: Any, tmp_path: Path,
                                                          verb: list[str]) -> None:
    config = yaml.safe_load(controlplane.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(yaml.safe_dump(config))
    spec = ["-f", str(write_spec(tmp_path, "x", nodes=1))] if verb == ["submit"] else []
    result = kt(*verb, *spec, "--skip-preflight" if spec else "-n=default", kubeconfig=unreachable)
    assert result.exit_code == 3  # could not reach the cluster: not the 1 of a failed job
    assert result.stderr == "error: cannot reach https://127.0.0.1:1: is the cluster running? (kubectl cluster-info)\n"
    bad = kt(*verb, *spec, "--context", "nope")
    assert bad.exit_code == 2 and bad.stderr == "error: --context nope: no such context in the kubeconfig " \
                                                 "(have: kubetrain-test)\n"


def test_kubeconfig_env_and_context_namespace(controlplane: Any, namespace: str, tmp_path: Path) -> None:
    config = yaml.safe_load(controlplane.kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    spec = str(write_spec(tmp_path, "ctx", nodes=1, gpus=0))
    result = CliRunner(env={"KUBECONFIG": str(path)}).invoke(cli, ["submit", "-f", spec])
    assert result.exit_code == 0, result.stderr
    assert f"PyTorchJob {namespace}/ctx created" in result.stderr  # the context's namespace
    listing = CliRunner(env={"KUBECONFIG": str(path)}).invoke(cli, ["list", "-o", "json"])
    assert [j["name"] for j in json.loads(listing.stdout)] == ["ctx"]
    pods_of(controlplane, namespace, "ctx", 1)  # and the job runs there


def test_submit_resolves_cloud_auto_from_the_nodes(kt: Any, namespace: str, tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "auto", nodes=1, placement={"cloud": "auto", "gpuType": "nvidia-h100-80gb"}))
    result = kt("submit", "-f", spec, "-n", namespace, "--dry-run", "client", "-o", "yaml")
    assert result.exit_code == 0, result.stderr
    assert "placement.cloud auto: this cluster looks like gke" in result.stderr
    job = next(d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "PyTorchJob")
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def test_an_elastic_job_passes_the_real_webhook_and_runs_workers_only(controlplane: Any, kt: Any, namespace: str,
                                                                      tmp_path: Path) -> None:
    spec = str(write_spec(tmp_path, "elastic", nodes=2, code=True,
                          elastic={"minNodes": 1, "maxNodes": 3, "maxRestarts": 2}))
    server = kt("submit", "-f", spec, "-n", namespace, "--dry-run=server", "-o", "json")
    assert server.exit_code == 0, server.stderr  # the training-operator's validating webhook said yes
    assert kt("submit", "-f", spec, "-n", namespace).exit_code == 0
    pods = pods_of(controlplane, namespace, "elastic", 2)
    assert {p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods} == {"worker"}
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "1:3"  # the operator's elastic env, from the elasticPolicy kubetrain rendered
    for pod in pods:
        controlplane.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")
    done = kt("status", "elastic", "-n", namespace, "-o", "json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["target"] == "pytorchjob"
