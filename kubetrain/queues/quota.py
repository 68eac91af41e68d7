"""Will a job fit its Kueue quota: the LocalQueue → ClusterQueue → per-flavor quota, over REST.

Kueue admits a job when one flavor of the ClusterQueue has quota for it: the flavor's `nominalQuota`, plus
what it may borrow from the other ClusterQueues of its cohort. `borrowingLimit` caps the borrowing; when
it is absent, the cap is what the cohort's other queues can lend (their `lendingLimit`, else their
nominal quota). So:

* never: the job's demand exceeds nominal + that cap in every flavor: it would wait forever;
* not now: it fits the cap, but the flavor's reservations (status.flavorsReservation) and the cohort's
  usage leave less than the demand free: it waits in the queue (Kueue says why once it is there);
* now: there is room.

Approximations, said in docs/queues.md: one flavor for the whole job (Kueue may give the pod sets of a
job different flavors), and only the GPU resource is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kubetrain.kube.errors import Forbidden
from kubetrain.kube.objects import GPU_RESOURCE as GPU
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.queues.workloads import kueue_get
from kubetrain.rules.quantity import parse_quantity

if TYPE_CHECKING:
    from kubetrain.kube.rest import Rest

NOW, NOT_NOW, NEVER, UNKNOWN = "now", "not-now", "never", "unknown"


@dataclass(frozen=True)
class QuotaVerdict:
    verdict: str  # now | not-now | never | unknown (a queue or permission problem: see message)
    message: str
    hint: str = ""
    cluster_queue: str = ""
    missing: bool = False  # the LocalQueue or ClusterQueue does not exist


def _q(value: Any) -> Decimal:
    return parse_quantity(value if value is not None else 0)


def _flavor_quotas(cq: dict[str, Any], resource: str) -> dict[str, dict[str, Any]]:
    """flavor -> the resource's quota entry ({nominalQuota, borrowingLimit?, lendingLimit?})."""
    out = {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        if resource not in (group.get("coveredResources") or []):
            continue
        for flavor in group.get("flavors") or []:
            for entry in flavor.get("resources") or []:
                if entry.get("name") == resource:
                    out[str(flavor.get("name"))] = entry
    return out


def _usage(cq: dict[str, Any], flavor: str, resource: str) -> Decimal:
    status = status_of(cq)
    for item in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        if item.get("name") == flavor:
            for res in item.get("resources") or []:
                if res.get("name") == resource:
                    return _q(res.get("total"))
    return Decimal(0)


def cohort_of(cq: dict[str, Any]) -> str:
    spec = cq.get("spec") or {}
    return str(spec.get("cohortName") or spec.get("cohort") or "")  # v1beta2 | v1beta1


def _lendable(others: list[dict[str, Any]], flavor: str, resource: str) -> tuple[Decimal, Decimal]:
    """(total the cohort's other ClusterQueues can lend in this flavor, how much of it is unused now)."""
    total = free = Decimal(0)
    for other in others:
        entry = _flavor_quotas(other, resource).get(flavor)
        if not entry:
            continue
        lend = _q(entry["lendingLimit"]) if entry.get("lendingLimit") is not None else _q(entry.get("nominalQuota"))
        total += lend
        free += max(Decimal(0), min(lend, _q(entry.get("nominalQuota")) - _usage(other, flavor, resource)))
    return total, free


def flavor_room(cq: dict[str, Any], others: list[dict[str, Any]], flavor: str,
                entry: dict[str, Any], resource: str) -> tuple[Decimal, Decimal, str]:
    """(most the ClusterQueue can ever get in this flavor, what is free now, how that was computed)."""
    nominal = _q(entry.get("nominalQuota"))
    lend_total, lend_free = _lendable(others, flavor, resource) if cohort_of(cq) else (Decimal(0), Decimal(0))
    limit = _q(entry["borrowingLimit"]) if entry.get("borrowingLimit") is not None else lend_total
    borrow_cap = min(limit, lend_total)
    used = _usage(cq, flavor, resource)
    free_now = max(Decimal(0), nominal - used) + min(borrow_cap, lend_free)
    how = f"flavor {flavor}: {nominal} nominal + {borrow_cap} borrowable, {used} in use"
    return nominal + borrow_cap, free_now, how


def _cohort_members(rest: Rest, cq: dict[str, Any]) -> list[dict[str, Any]]:
    cohort = cohort_of(cq)
    if not cohort:
        return []
    items = (kueue_get(rest, "clusterqueues") or {}).get("items") or []
    name = meta_of(cq).get("name")
    return [o for o in items if cohort_of(o) == cohort and meta_of(o).get("name") != name]


def quota_verdict(rest: Rest, namespace: str, queue: str, demand: Decimal | int, resource: str = GPU) -> QuotaVerdict:
    """Where a job needing `demand` of `resource` stands with LocalQueue `queue`. 2–3 requests."""
    lq = kueue_get(rest, "localqueues", namespace, queue)
    if lq is None:
        return QuotaVerdict(UNKNOWN, f"LocalQueue {queue} not found in namespace {namespace} (or Kueue is not "
                            "installed)", f"kubectl get localqueues -n {namespace}; fix spec.scheduling.queue",
                            missing=True)
    cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
    where = f"LocalQueue {queue} → ClusterQueue {cq_name}"
    try:
        cq = kueue_get(rest, "clusterqueues", name=cq_name)
        if cq is None:
            return QuotaVerdict(UNKNOWN, f"{where}, which does not exist", "ask the cluster admin",
                                cq_name, missing=True)
        others = _cohort_members(rest, cq)
    except Forbidden:
        return QuotaVerdict(UNKNOWN, f"{where} (not allowed to read its quota)", cluster_queue=cq_name)
    return _judge(cq, others, where, demand, resource)


def _judge(cq: dict[str, Any], others: list[dict[str, Any]], where: str, demand: Decimal | int,
           resource: str) -> QuotaVerdict:
    name = str(meta_of(cq).get("name") or "")
    if not demand:
        return QuotaVerdict(NOW, f"{where}: the job requests no {resource} quota", cluster_queue=name)
    quotas = _flavor_quotas(cq, resource)
    if not quotas:
        return QuotaVerdict(NEVER, f"{where} has no quota for {resource}", "use a queue whose ClusterQueue "
                            f"covers {resource} (kubectl get clusterqueues)", name)
    rooms = [flavor_room(cq, others, flavor, entry, resource) for flavor, entry in quotas.items()]
    most = max(r[0] for r in rooms)
    details = "; ".join(r[2] for r in rooms)
    if demand > most:
        return QuotaVerdict(NEVER, f"needs {_n(demand)} {resource} but {where} can get at most {_n(most)} "
                            f"({details})", "fewer nodes or GPUs per node, or a queue with more quota", name)
    if any(demand <= free for _, free, _ in rooms):
        return QuotaVerdict(NOW, f"{where}: quota for {_n(demand)} {resource} free now ({details})",
                            cluster_queue=name)
    free = max(r[1] for r in rooms)
    pending = int(status_of(cq).get("pendingWorkloads") or 0)
    return QuotaVerdict(NOT_NOW, f"will wait in {where}: needs {_n(demand)} {resource}, {_n(free)} free now, "
                        f"{pending} workload(s) pending ({details})",
                        "it starts when quota frees up; `kubetrain status` shows its place", name)


def _n(value: Decimal | int) -> str:
    value = Decimal(value)
    return str(int(value)) if value == value.to_integral_value() else str(value)
