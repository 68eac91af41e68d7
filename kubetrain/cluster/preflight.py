"""Checks before submitting: reachable, allowed, installed, namespace, references, fits. Each → ✓/✗/! + hint."""

from __future__ import annotations

from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubetrain.checks import FAIL, OK, WARN, Check
from kubetrain.cluster import fit as fitting
from kubetrain.cluster.doctor import Unreadable, deployment_health, find_operator
from kubetrain.errors import ClusterError
from kubetrain.fieldpath import join_path
from kubetrain.jobs import devices
from kubetrain.jobs.crud import pod_specs
from kubetrain.jobs.podcheck import pod_template_problems
from kubetrain.jobs.targets import Target, served
from kubetrain.kube.access import can_i
from kubetrain.kube.errors import CRD_HINT, ApiError, NotFound, api_message, translate
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.kube.rest import Rest, path_of
from kubetrain.queues import quota
from kubetrain.queues.workloads import queue_of
from kubetrain.rules.k8s.templates import pod_templates
from kubetrain.rules.quantity import parse_quantity

# What `--skip-preflight=NAME` accepts (the API server's reachability is always checked), and "all".
SKIPPABLE = ("permissions", "crd", "operator", "namespace", "references", "pod-templates", "fit", "queue")


@dataclass(frozen=True)
class Reference:
    kind: str  # Secret | PersistentVolumeClaim | imagePullSecret | ServiceAccount
    name: str


def run(rest: Rest, target: Target, objects: list[dict[str, Any]], namespace: str,
        server: str = "", skip: Collection[str] = ()) -> list[Check]:
    """Every check, in order, but those named in `skip` (SKIPPABLE); stops after the first if the API server
    cannot be reached."""
    reach = check_reachable(rest, server)
    if reach.status == FAIL:
        return [reach]
    job = objects[-1]
    results = [reach]
    add = _adder(results, skip)
    with_configmap = any(o.get("kind") == "ConfigMap" for o in objects)
    add("permissions", lambda: check_access(rest, target, namespace, with_configmap=with_configmap))
    installed = add("crd", lambda: check_crd(rest, target))
    if installed is None or installed.status == OK:
        add("operator", lambda: check_operator(rest, target))
    ns = add("namespace", lambda: check_namespace(rest, namespace))
    if ns is None or ns.status != FAIL:
        if "references" in skip:
            results.append(_skipped("references"))
        else:
            results += check_references(rest, namespace, references(job))
        add("pod-templates", lambda: check_pod_templates(rest, job, namespace))
    add("fit", lambda: fit_check(rest, target, objects, namespace))
    if (queue := queue_of(job)) and (ns is None or ns.status != FAIL):
        add("queue", lambda: check_queue(rest, objects, namespace, queue))
    return results


def _skipped(name: str) -> Check:
    return Check(name, WARN, f"not checked (--skip-preflight={name})")


def _adder(results: list[Check], skip: Collection[str]) -> Callable[[str, Callable[[], Check]],
                                                                          Check | None]:
    """add(name, check): run the check and append its result, or append "not checked" if it is skipped."""
    def add(name: str, check: Callable[[], Check]) -> Check | None:
        if name in skip:
            results.append(_skipped(name))
            return None
        result = check()
        results.append(result)
        return result

    return add


def check_pod_templates(rest: Rest, job: dict[str, Any], namespace: str) -> Check:
    """Each pod template, dry-run created as a Pod: what the operator will create, judged by the server."""
    if not any(t.stage and not t.partial for t in pod_templates(job)):
        return Check("pod-templates", OK, "none to dry-run (a TrainJob's runtime patches are merged into the "
                     "runtime by the Trainer)")
    def post(where: str, pod: dict[str, Any]) -> None:  # raw: the typed client would vet the body itself
        rest.json("POST", f"/api/v1/namespaces/{where}/pods", {"dryRun": "All"}, pod)

    try:
        problems = pod_template_problems(post, job, namespace)
    except Exception as exc:
        return Check("pod-templates", WARN, f"not checked: {translate(exc, 'dry-run create pods')}")
    if problems:
        return Check("pod-templates", FAIL, "; ".join(f"{join_path(path)}: {message}"
                                                            for path, message in problems))
    return Check("pod-templates", OK, "the API server accepts every pod template as a Pod (dry run)")


def check_reachable(rest: Rest, server: str) -> Check:
    try:
        version = rest.get("/version")
    except Exception as exc:  # any failure here is "cannot talk to the cluster"; say why in one line
        error = exc if isinstance(exc, ClusterError) else translate(exc, "reach the API server", server)
        return Check("API server", FAIL, str(error))
    return Check("API server", OK, f"{server or 'reachable'} (Kubernetes {version.get('major')}."
                                         f"{version.get('minor')})")


def check_access(rest: Rest, target: Target, namespace: str, with_configmap: bool) -> Check:
    wanted = [("create", target.group, target.plural), ("get", target.group, target.plural)]
    if with_configmap:
        wanted.append(("create", "", "configmaps"))
    try:
        denied = [(verb, group, res) for verb, group, res in wanted if not can_i(rest, verb, group, res, namespace)[0]]
    except ApiError as exc:
        return Check("permissions", WARN, f"cannot ask the API server ({api_message(exc)})")
    if not denied:
        return Check("permissions", OK, f"may create {target.resource} in namespace {namespace}")
    names = ", ".join(f"{verb} {res}{'.' + group if group else ''}" for verb, group, res in denied)
    verb, group, res = denied[0]
    resource = f"{res}.{group}" if group else res
    return Check("permissions", FAIL, f"not allowed to {names} in namespace {namespace}",
                       f"ask a cluster admin for a Role granting it (check: kubectl auth can-i {verb} {resource} "
                       f"-n {namespace})")


def check_crd(rest: Rest, target: Target) -> Check:
    try:
        present = served(rest, target)
    except ApiError as exc:
        return Check("CRD", WARN, f"cannot discover {target.api_version}: {api_message(exc)}")
    if present:
        return Check("CRD", OK, f"{target.kind} ({target.api_version}) installed")
    return Check("CRD", FAIL, f"{target.kind} ({target.api_version}) is not installed", CRD_HINT)


def check_operator(rest: Rest, target: Target) -> Check:
    """The operator's Deployment (the same lookup and verdict as `kubetrain doctor`); it may run elsewhere,
    or we may not read Deployments: then a note."""
    deployment = find_operator(rest, target.operators)
    if isinstance(deployment, Unreadable):
        return Check("operator", WARN, f"cannot check the {target.operator_name} Deployment: {deployment}")
    if deployment is None:
        places = ", ".join(f"{ns}/{n}" for ns, n in target.operators)
        return Check("operator", WARN, f"no {target.operator_name} Deployment at {places}; assuming it "
                           "runs elsewhere")
    healthy, text = deployment_health(deployment)
    if healthy:
        return Check("operator", OK, text)
    namespace, name = deployment["metadata"]["namespace"], deployment["metadata"]["name"]
    return Check("operator", FAIL, f"{text}: not ready",
                       f"jobs will not start until it is: kubectl -n {namespace} describe deployment {name}")


def check_namespace(rest: Rest, namespace: str) -> Check:
    try:
        rest.get(f"/api/v1/namespaces/{namespace}")
    except NotFound:
        return Check("namespace", FAIL, f"{namespace} does not exist",
                     f"create it: kubectl create namespace {namespace}")
    except ApiError as exc:
        return Check("namespace", WARN, f"cannot check {namespace}: {api_message(exc)}")
    return Check("namespace", OK, f"{namespace} exists")


def references(job: dict[str, Any]) -> list[Reference]:
    """Secrets, PVCs, imagePullSecrets and the ServiceAccount the job's pods need (optional ones left out)."""
    found: list[Reference] = []
    for _, pod in pod_specs(job):
        for container in pod.get("containers") or []:
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref and not ref.get("optional"):
                    found.append(Reference("Secret", ref["name"]))
            for source in container.get("envFrom") or []:
                ref = source.get("secretRef")
                if ref and not ref.get("optional"):
                    found.append(Reference("Secret", ref["name"]))
        for volume in pod.get("volumes") or []:
            if (volume.get("secret") or {}).get("secretName") and not volume["secret"].get("optional"):
                found.append(Reference("Secret", volume["secret"]["secretName"]))
            if volume.get("persistentVolumeClaim"):
                found.append(Reference("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]))
        found += [Reference("imagePullSecret", s["name"]) for s in pod.get("imagePullSecrets") or []]
        if pod.get("serviceAccountName") and pod["serviceAccountName"] != "default":
            found.append(Reference("ServiceAccount", pod["serviceAccountName"]))
    return list(dict.fromkeys(found))


READ_PLURALS = {"Secret": "secrets", "imagePullSecret": "secrets", "PersistentVolumeClaim": "persistentvolumeclaims",
                "ServiceAccount": "serviceaccounts"}


def _reader(rest: Rest, kind: str) -> Callable[[str, str], dict[str, Any]]:
    return lambda name, namespace: rest.get(path_of("", "v1", READ_PLURALS[kind], namespace, name))


def _missing_hint(ref: Reference, namespace: str) -> str:
    return {
        "Secret": f"create it: kubectl create secret generic {ref.name} -n {namespace} --from-literal=KEY=VALUE",
        "imagePullSecret": f"create it: kubectl create secret docker-registry {ref.name} -n {namespace} "
                           "--docker-server=... --docker-username=... --docker-password=...",
        "PersistentVolumeClaim": f"create the claim in {namespace} or fix spec.volumes",
        "ServiceAccount": f"create it: kubectl create serviceaccount {ref.name} -n {namespace}",
    }[ref.kind]


def check_references(rest: Rest, namespace: str, refs: list[Reference]) -> list[Check]:
    if not refs:
        return [Check("references", OK, "the job references no Secret, PVC or ServiceAccount")]
    results, present = [], []
    for ref in refs:
        try:
            found = _reader(rest, ref.kind)(ref.name, namespace)
            present.append(f"{ref.kind} {ref.name}")
            if ref.kind == "PersistentVolumeClaim" and (unbound := pvc_binding(rest, found)) is not None:
                results.append(unbound)
        except NotFound:
            results.append(Check("references", FAIL, f"{ref.kind} {ref.name} not found in namespace "
                                 f"{namespace}", _missing_hint(ref, namespace)))
        except ApiError as exc:
            results.append(Check("references", WARN, f"cannot check {ref.kind} {ref.name}: "
                                 f"{api_message(exc)}"))
    if present:
        results.insert(0, Check("references", OK, ", ".join(present) + " exist"))
    return results


DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def pvc_binding(rest: Rest, claim: dict[str, Any]) -> Check | None:
    """A Pending claim that nothing can bind: a StorageClass that does not exist, or no class at all and no
    Available PersistentVolume big enough with its access modes. None when it is (or can get) bound."""
    if status_of(claim).get("phase") != "Pending":
        return None
    name, spec = claim["metadata"]["name"], claim.get("spec") or {}
    classes: list[dict[str, Any]] = rest.get("/apis/storage.k8s.io/v1/storageclasses").get("items") or []
    by_name = {c["metadata"]["name"]: c for c in classes}
    wanted = spec.get("storageClassName")
    if wanted is None:  # the default class, if the cluster has one
        wanted = next((n for n, c in by_name.items()
                       if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"), "")
    wanted = str(wanted)
    if wanted and wanted not in by_name:
        return Check("references", FAIL, f"PersistentVolumeClaim {name} can never bind: StorageClass "
                           f"{wanted} does not exist", "kubectl get storageclass; fix the claim's storageClassName")
    if wanted and by_name[wanted].get("provisioner") != "kubernetes.io/no-provisioner":
        return None  # dynamic provisioning (Immediate or WaitForFirstConsumer): it binds when provisioned
    if _matching_volume(rest, spec, wanted):
        return None
    return Check("references", FAIL, f"PersistentVolumeClaim {name} can never bind: no StorageClass "
                       f"provisions it and no Available PersistentVolume{' of class ' + wanted if wanted else ''} "
                       "has its size and access modes", "create a matching PersistentVolume, or give the claim "
                       "a StorageClass that provisions volumes (kubectl get storageclass)")


def _matching_volume(rest: Rest, claim: dict[str, Any], wanted: str) -> bool:
    size = parse_quantity(((claim.get("resources") or {}).get("requests") or {}).get("storage") or "0")
    modes = set(claim.get("accessModes") or [])
    volumes: list[dict[str, Any]] = rest.get("/api/v1/persistentvolumes").get("items") or []
    for pv in volumes:
        spec = pv.get("spec") or {}
        if (status_of(pv).get("phase") == "Available" and (spec.get("storageClassName") or "") == wanted
                and parse_quantity((spec.get("capacity") or {}).get("storage") or "0") >= size
                and modes <= set(spec.get("accessModes") or [])):
            return True
    return False


def fit_request(job: dict[str, Any]) -> fitting.FitRequest:
    """The fit question for a rendered job: its pod count, GPUs per pod and placement."""
    specs = pod_specs(job)
    pods = sum(n for n, _ in specs)
    first = specs[0][1] if specs else {}
    gpus = max((fitting.pod_request({"spec": spec}) for _, spec in specs), default=0)
    return fitting.FitRequest(pods, gpus, dict(first.get("nodeSelector") or {}), list(first.get("tolerations") or []))


def check_fit(rest: Rest, job: dict[str, Any], target: Target, namespace: str, name: str) -> Check:
    request = fit_request(job)
    if request.gpus_per_pod == 0:
        return Check("fit", OK, "CPU job: no GPUs needed")
    try:
        nodes, pods = fit_inputs(rest)
    except ApiError as exc:
        return Check("fit", WARN, f"cannot check GPU capacity: {api_message(exc)}")
    # A re-submitted job's own pods hold GPUs it will keep using: they are not competition.
    pods = [p for p in pods if not _owned(p, target, namespace, name)]
    result = fitting.fit(nodes, pods, request)
    if result.fits:
        return Check("fit", OK, result.message)
    if result.never:
        return Check("fit", FAIL, result.message, result.hint)
    # Not now: the pods would queue behind others. Worth knowing (who holds the GPUs), not a refusal.
    held = fitting.holders(pods, result.nodes, request.resource)
    return Check("fit", WARN, f"not now: {result.message}" + (f"; GPUs held by {held}" if held else ""),
                       result.hint)


def fit_check(rest: Rest, target: Target, objects: list[dict[str, Any]], namespace: str) -> Check:
    """The fit of the job's GPUs: its DRA claims when it has claim templates, else its nvidia.com/gpu."""
    job = objects[-1]
    templates = [o for o in objects if o.get("kind") == "ResourceClaimTemplate"]
    if templates:
        return check_dra_fit(rest, job, templates)
    return check_fit(rest, job, target, namespace, job["metadata"]["name"])


def dra_demand(job: dict[str, Any], templates: list[dict[str, Any]]) -> dict[devices.Request, tuple[int, str]]:
    """Each distinct device request of the job's claim templates -> (pods that claim it, a template's name).
    A TrainJob's pods claim through its TrainingRuntime: every one of its numNodes pods claims each template."""
    by_name = {t["metadata"]["name"]: t for t in templates}
    if job.get("kind") == "TrainJob":
        nodes = int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)
        claimed = [(nodes, name) for name in by_name]
    else:
        claimed = [(replicas, str(claim.get("resourceClaimTemplateName"))) for replicas, pod in pod_specs(job)
                   for claim in pod.get("resourceClaims") or []]
    demand: dict[devices.Request, tuple[int, str]] = {}
    for pods, name in claimed:
        template = by_name.get(name)
        for request in devices.requests_of(((template or {}).get("spec") or {}).get("spec") or {}):
            total, first = demand.get(request, (0, name))
            demand[request] = (total + pods, first)
    return demand


def check_dra_fit(rest: Rest, job: dict[str, Any], templates: list[dict[str, Any]]) -> Check:
    """Will the job's claims be allocated: its requests against the ResourceSlices' devices that match their
    DeviceClass and selectors, less those existing ResourceClaims hold. Never → refusal, not now → warning."""
    try:
        if not devices.served(rest):
            return Check("fit", FAIL, "the job claims devices through DRA, but the cluster does not serve "
                               "resource.k8s.io/v1 (Kubernetes >= 1.34)", "use spec.gpus.via: plugin")
        inventory = devices.read_inventory(rest)
    except ApiError as exc:
        return Check("fit", WARN, f"cannot check DRA devices: {api_message(exc)}")
    fits, short, never = [], [], False
    for request, (pods, template) in dra_demand(job, templates).items():
        found = devices.match(inventory, request)
        free = inventory.free(found.devices)
        problem = devices.shortfall(inventory, request, pods, f"ResourceClaimTemplate {template}")
        if problem is None:
            fits.append(f"{pods} pod(s) × {request.count} {request.device_class}: {len(free)} of "
                        f"{len(found.devices)} matching device(s) free")
            continue
        never = never or devices.pods_that_fit(found.devices, request.count) < pods
        held = sorted({inventory.held[d.key] for d in found.devices if d.key in inventory.held})
        short.append(problem + (f"; held by claims {', '.join(held[:5])}" if held else ""))
    if not short:
        return Check("fit", OK, "; ".join(fits) or "the claim templates request no devices")
    if never:
        return Check("fit", FAIL, f"can never fit: {'; '.join(short)}", "check the DeviceClass and "
                           "spec.gpus.selectors against kubectl get resourceslices -o yaml, or lower gpusPerNode / "
                           "nodes")
    return Check("fit", WARN, f"not now: {'; '.join(short)}", "the pods wait (Pending) until devices free up")


# Pods that hold a node's GPUs: bound to a node (an unscheduled Pending pod holds nothing) and not finished.
HOLDING = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def fit_inputs(rest: Rest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every Node and every Pod holding a node's resources, as plain dicts: two requests, sent at once.

    Plain JSON over the REST client, not the kubernetes package's models: turning 200 Nodes into V1Node
    objects and back into dicts was most of the fit check's time. `resourceVersion=0` lets the API server
    answer from its watch cache instead of a quorum read from etcd (kubectl get does the same for
    informers; a preflight does not need the very latest write). The cache ignores `limit`, so this is
    one page, which is what the fit needs anyway (all nodes, all GPU-holding pods)."""
    with ThreadPoolExecutor(1) as pool:
        nodes = pool.submit(rest.get, "/api/v1/nodes", resourceVersion="0")
        pods = rest.get("/api/v1/pods", fieldSelector=HOLDING, resourceVersion="0")
        return list(nodes.result().get("items") or []), list(pods.get("items") or [])


def _owned(pod: dict[str, Any], target: Target, namespace: str, name: str) -> bool:
    meta = meta_of(pod)
    return bool(meta.get("namespace") == namespace and (meta.get("labels") or {}).get(target.pod_label) == name)


def check_queue(rest: Rest, objects: list[dict[str, Any]], namespace: str, queue: str) -> Check:
    """Kueue: the LocalQueue exists, which ClusterQueue it feeds, and whether its quota can ever (or now) hold
    what the job asks for: its GPUs (nvidia.com/gpu, or its DRA devices as Kueue counts them), or for a CPU
    job its CPUs. Never → refusal, not now → a warning (the job waits in the queue)."""
    job = objects[-1]
    templates = [o for o in objects if o.get("kind") == "ResourceClaimTemplate"]
    if templates:
        return check_dra_queue(rest, job, templates, namespace, queue)
    request = fit_request(job)
    resource, demand = request.resource, Decimal(request.pods * request.gpus_per_pod)
    if not demand:  # a CPU job: a ClusterQueue without GPU quota is fine; its CPU quota is what counts
        resource, demand = "cpu", cpu_demand(job)
    return queue_result(rest, namespace, queue, demand, resource)


def queue_result(rest: Rest, namespace: str, queue: str, demand: Decimal, resource: str) -> Check:
    try:
        verdict = quota.quota_verdict(rest, namespace, queue, demand, resource)
    except (ClusterError, ApiError) as exc:
        reason = api_message(exc) if isinstance(exc, ApiError) else str(exc)
        return Check("queue", WARN, f"cannot check LocalQueue {queue}: {reason}")
    status = {quota.NOW: OK, quota.NOT_NOW: WARN, quota.NEVER: FAIL}.get(verdict.verdict, WARN)
    return Check("queue", FAIL if verdict.missing else status, verdict.message, verdict.hint)


def check_dra_queue(rest: Rest, job: dict[str, Any], templates: list[dict[str, Any]], namespace: str,
                    queue: str) -> Check:
    """The job's DRA devices against the quota of the resource Kueue's deviceClassMappings count them as (one
    verdict per resource; the worst is shown). An unmapped DeviceClass is a refusal: Kueue never admits it."""
    from kubetrain.queues import devices as kueue_devices

    per_class: dict[str, int] = {}
    for request, (pods, _) in dra_demand(job, templates).items():
        per_class[request.device_class] = per_class.get(request.device_class, 0) + pods * request.count
    try:
        mappings = kueue_devices.device_class_mappings(rest)
    except ApiError as exc:
        return Check("queue", WARN, f"cannot check LocalQueue {queue}: {api_message(exc)}")
    if mappings is None:
        return Check("queue", WARN, f"cannot check LocalQueue {queue} for DRA devices: Kueue counts them "
                     f"through its deviceClassMappings, and its configuration ({kueue_devices.WHERE}) could "
                     "not be read")
    unmapped = sorted(c for c in per_class if c not in mappings)
    if unmapped:
        return Check("queue", FAIL, f"Kueue does not count DeviceClass {', '.join(unmapped)}: no entry of "
                     f"resources.deviceClassMappings in its configuration ({kueue_devices.WHERE}) maps it, "
                     "so Kueue never admits the job", "ask the cluster admin to map the DeviceClass to a "
                     "resource the ClusterQueue gives quota for")
    per_resource: dict[str, int] = {}
    for device_class, count in per_class.items():
        per_resource[mappings[device_class]] = per_resource.get(mappings[device_class], 0) + count
    results = [queue_result(rest, namespace, queue, Decimal(n), resource) for resource, n in per_resource.items()]
    order = {FAIL: 0, WARN: 1, OK: 2}
    return min(results, key=lambda r: order.get(r.status, 1)) if results else \
        Check("queue", OK, "the claim templates request no devices")


def cpu_demand(job: dict[str, Any]) -> Decimal:
    """CPUs the job's pods request (requests default to limits), as Kueue sums them for its quota."""
    total = Decimal(0)
    for replicas, spec in pod_specs(job):
        for container in spec.get("containers") or []:
            res = container.get("resources") or {}
            cpu = (res.get("requests") or {}).get("cpu", (res.get("limits") or {}).get("cpu", 0))
            total += replicas * parse_quantity(cpu)
    return total
