"""Dynamic Resource Allocation on a cluster, as plain dicts: the devices ResourceSlices publish, which of
them ResourceClaims hold, which a request's DeviceClass and CEL selectors match, and why a claim cannot be
allocated, in one line. Pure functions; the reads are `read_inventory` and `job_claims`.

Selectors are evaluated as the scheduler does (k8s.io/dynamic-resource-allocation/cel): `device.driver`,
`device.attributes[DOMAIN].NAME` and `device.capacity[DOMAIN].NAME`, with `quantity("80Gi")` and a
quantity's `compareTo`, `isGreaterThan`, `isLessThan`, `asInteger` and `asApproximateFloat`. An expression
that fails on a device (a missing attribute) does not match it, as in the scheduler. Library: cel-expr-python
(kubetrain/validate/cel.py says why); quantities are whole numbers here (byte and device counts), so a
fractional capacity is rounded down.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kubetrain.kube import errors
from kubetrain.kube.objects import meta_of, status_of
from kubetrain.kube.parallel import start
from kubetrain.kube.rest import Rest
from kubetrain.rules.quantity import parse_quantity

API = "/apis/resource.k8s.io/v1"
ANY_NODE = ""  # a device not bound to one node (allNodes, or a node selector)


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    node: str  # ANY_NODE when the slice is not for one node
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)
    capacity: dict[str, dict[str, int]] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name

    def as_cel(self) -> dict[str, Any]:
        return {"driver": self.driver, "attributes": self.attributes, "capacity": self.capacity}


@dataclass(frozen=True)
class Request:
    """One `exactly` request of a claim: `count` devices of `device_class` that pass every selector."""

    device_class: str
    count: int
    selectors: tuple[str, ...] = ()
    all_devices: bool = False


@dataclass
class Inventory:
    classes: dict[str, dict[str, Any]]
    devices: list[Device]
    held: dict[tuple[str, str, str], str]  # device key -> the claim holding it, "namespace/name"

    def free(self, devices: list[Device]) -> list[Device]:
        return [d for d in devices if d.key not in self.held]


# ---- reading ------------------------------------------------------------------------------------------------

def served(rest: Rest) -> bool:
    """resource.k8s.io/v1 is served (Kubernetes >= 1.34)."""
    try:
        resources = rest.get(API).get("resources") or []
    except errors.NotFound:
        return False
    return any(r.get("name") == "deviceclasses" for r in resources)


def read_inventory(rest: Rest) -> Inventory:
    """DeviceClasses, ResourceSlices and every ResourceClaim: three lists, from the watch cache."""
    slices = start(rest.get, f"{API}/resourceslices", resourceVersion="0")
    claims = start(rest.get, f"{API}/resourceclaims", resourceVersion="0")
    classes = rest.get(f"{API}/deviceclasses", resourceVersion="0")
    return inventory(classes.get("items") or [], slices.result().get("items") or [],
                     claims.result().get("items") or [])


def job_claims(rest: Rest, namespace: str, label_selector: str) -> list[dict[str, Any]]:
    """The ResourceClaims made from a job's templates (they carry the job's labels)."""
    return list(rest.get(f"{API}/namespaces/{namespace}/resourceclaims", labelSelector=label_selector)
                .get("items") or [])


# ---- the inventory ------------------------------------------------------------------------------------------

def inventory(classes: list[dict[str, Any]], slices: list[dict[str, Any]], claims: list[dict[str, Any]]
              ) -> Inventory:
    return Inventory({str(meta_of(c).get("name")): c for c in classes}, devices(slices), held_devices(claims))


def devices(slices: list[dict[str, Any]]) -> list[Device]:
    found = []
    for item in slices:
        spec = item.get("spec") or {}
        driver, pool = str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or "")
        node = str(spec.get("nodeName") or ANY_NODE)
        for device in spec.get("devices") or []:
            found.append(Device(driver, pool, str(device.get("name")), node,
                                _attributes(driver, device.get("attributes") or {}),
                                _capacity(driver, device.get("capacity") or {})))
    return found


def _qualified(driver: str, name: str) -> tuple[str, str]:
    """'model' is the driver's own attribute; 'gpu.nvidia.com/model' names its domain."""
    domain, _, short = name.rpartition("/")
    return (domain or driver), short


def _attributes(driver: str, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        domain, short = _qualified(driver, name)
        typed = value if isinstance(value, dict) else {}
        plain = next((typed[k] for k in ("string", "int", "bool", "version") if k in typed), None)
        out.setdefault(domain, {})[short] = plain
    return out


def _capacity(driver: str, raw: dict[str, Any]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, value in raw.items():
        domain, short = _qualified(driver, name)
        try:
            out.setdefault(domain, {})[short] = int(parse_quantity(str((value or {}).get("value", "0"))))
        except ValueError:
            continue
    return out


def held_devices(claims: list[dict[str, Any]]) -> dict[tuple[str, str, str], str]:
    held = {}
    for claim in claims:
        results = ((status_of(claim).get("allocation") or {}).get("devices") or {}).get("results") or []
        owner = f"{meta_of(claim).get('namespace')}/{meta_of(claim).get('name')}"
        for result in results:
            held[(str(result.get("driver")), str(result.get("pool")), str(result.get("device")))] = owner
    return held


def allocated_devices(claim: dict[str, Any]) -> list[str]:
    """'driver/pool/device' of each device allocated to a claim."""
    results = ((status_of(claim).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results]


def requests_of(claim_spec: dict[str, Any]) -> list[Request]:
    """A claim's (or a template's spec.spec) `exactly` requests; of a `firstAvailable` list, the first."""
    found = []
    for request in ((claim_spec.get("devices") or {}).get("requests")) or []:
        exact = request.get("exactly") or next(iter(request.get("firstAvailable") or []), None) or {}
        selectors = tuple(str((s.get("cel") or {}).get("expression") or "") for s in exact.get("selectors") or [])
        all_devices = exact.get("allocationMode") == "All"
        found.append(Request(str(exact.get("deviceClassName") or ""), int(exact.get("count") or 1), selectors,
                             all_devices))
    return found


# ---- matching -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Match:
    devices: list[Device]  # of the class, passing every selector
    class_devices: int  # devices the DeviceClass's own selectors let through
    empty_selector: str | None = None  # the first request selector that matches none of the class's devices
    missing_class: bool = False


def match(inventory_: Inventory, request: Request) -> Match:
    device_class = inventory_.classes.get(request.device_class)
    if device_class is None:
        return Match([], 0, missing_class=True)
    class_selectors = [str((s.get("cel") or {}).get("expression") or "")
                       for s in (device_class.get("spec") or {}).get("selectors") or []]
    candidates = [d for d in inventory_.devices if all(passes(e, d) for e in class_selectors)]
    matched, empty = candidates, None
    for expression in request.selectors:
        matched = [d for d in matched if passes(expression, d)]
        if not matched and empty is None:
            empty = expression
    return Match(matched, len(candidates), empty)


def passes(expression: str, device: Device) -> bool:
    try:
        result = _compiled(expression).eval(data={"device": device.as_cel()})
    except Exception:  # a selector that does not compile here matches nothing here either
        return False
    return result.value() is True


def per_node(found: list[Device]) -> Counter[str]:
    return Counter(d.node for d in found)


def pods_that_fit(free: list[Device], count: int) -> int:
    """Pods of `count` devices each that free devices can hold: a claim's devices are all on the pod's node
    (devices of node-less slices are shared by every node, so they are counted once, as one more place)."""
    return sum(n // count for n in per_node(free).values()) if count else 0


def shortfall(inventory_: Inventory, request: Request, pods: int, claim: str) -> str | None:
    """One line on why `pods` claims like this cannot all be allocated now, or None when they can."""
    found = match(inventory_, request)
    what = f"{request.count} device(s) of DeviceClass {request.device_class}"
    if found.missing_class:
        return f"{claim}: DeviceClass {request.device_class} does not exist (kubectl get deviceclasses)"
    if found.empty_selector is not None:
        return (f"{claim}: selector `{found.empty_selector}` matches none of the {found.class_devices} device(s) "
                f"of DeviceClass {request.device_class}")
    free = inventory_.free(found.devices)
    if pods_that_fit(free, request.count) >= pods:
        return None
    largest = max(per_node(found.devices).values(), default=0)
    if largest < request.count:
        return (f"{claim}: needs {what} on one node, but no node has more than {largest} matching device(s) "
                f"({len(found.devices)} in all)")
    return (f"{claim}: needs {what} per pod for {pods} pod(s); {len(free)} of {len(found.devices)} matching "
            f"device(s) are free, enough for {pods_that_fit(free, request.count)} pod(s)")


# ---- CEL ------------------------------------------------------------------------------------------------------

def _quantity(text: str) -> int:
    return int(parse_quantity(text))


def _compare(left: int, right: int) -> int:
    return (left > right) - (left < right)


@cache
def _environment() -> Any:
    from cel_expr_python import cel  # imported only when there are selectors to evaluate

    kind = cel.Type

    def member(name: str, result: Any, impl: Any, *parameters: Any) -> Any:
        return cel.FunctionDecl(name, [cel.Overload(f"int_{name}", result, [kind.INT, *parameters], True, impl)])

    functions = [
        cel.FunctionDecl("quantity", [cel.Overload("quantity_string", kind.INT, [kind.STRING], False, _quantity)]),
        member("compareTo", kind.INT, _compare, kind.INT),
        member("isGreaterThan", kind.BOOL, lambda a, b: a > b, kind.INT),
        member("isLessThan", kind.BOOL, lambda a, b: a < b, kind.INT),
        member("asInteger", kind.INT, lambda a: a),
        member("asApproximateFloat", kind.DOUBLE, float),
    ]
    return cel.NewEnv(variables={"device": kind.DYN}, functions=functions)


@cache
def _compiled(expression: str) -> Any:
    return _environment().compile(expression)


# ---- status -------------------------------------------------------------------------------------------------

def pending_claim_hints(rest: Rest, namespace: str, label_selector: str, waiting: list[dict[str, Any]]
                        ) -> list[str]:
    """One line per device request that the `waiting` pods' (kubetrain.jobs.pods.waiting_for_claims)
    unallocated claims wait for: which claims, and which selector matched nothing or how many devices are
    free. Empty when no pod waits, or the user may not read ResourceSlices and claims (the scheduler's own
    message is among the hints anyway)."""
    if not waiting:
        return []
    try:
        claims = job_claims(rest, namespace, label_selector)
        inventory_ = read_inventory(rest)
    except (errors.Forbidden, errors.NotFound):
        return []
    return claim_hints(waiting, claims, inventory_)


def claim_hints(waiting: list[dict[str, Any]], claims: list[dict[str, Any]], inventory_: Inventory) -> list[str]:
    names = {str(s.get("resourceClaimName")) for p in waiting
             for s in status_of(p).get("resourceClaimStatuses") or [] if s.get("resourceClaimName")}
    unallocated = [c for c in claims if str(meta_of(c).get("name")) in names
                   and not status_of(c).get("allocation")]
    groups: dict[Request, list[str]] = {}
    for claim in unallocated:
        for request in requests_of(claim.get("spec") or {}):
            groups.setdefault(request, []).append(str(meta_of(claim).get("name")))
    hints = []
    for request, claimed in groups.items():
        shown = ", ".join(sorted(claimed)[:3]) + (f" and {len(claimed) - 3} more" if len(claimed) > 3 else "")
        line = shortfall(inventory_, request, len(claimed), f"ResourceClaim {shown}")
        hints.append(line or f"ResourceClaim {shown}: not allocated yet, though {len(claimed)} such claim(s) fit "
                             "the free devices (the scheduler has not placed the pods yet, or another resource is "
                             "short)")
    return hints
