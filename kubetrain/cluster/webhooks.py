"""`kubetrain doctor`'s admission-webhook checks for the training APIs.

A validating or mutating webhook whose backend is down makes the API server refuse every create it
covers with a 500 ("failed calling webhook ..."), while the operator's Deployment may look healthy. Two
looks:

* configuration: every webhook whose rules cover a training API group; a Service backend must have a ready
  endpoint (EndpointSlices), else it is a failure when its failurePolicy is Fail;
* a probe: a server-side dry-run create of a minimal PyTorchJob in the namespace (nothing is stored;
  webhooks run on dry runs when they declare no side effects), which shows the failure the user would
  get, whatever the backend (a Service or a URL);
* recent failures: Warning Events of the last hour in the namespace whose message says a webhook call
  failed (controllers record FailedCreate with the API server's "failed calling webhook" text when a
  webhook refuses their pods or jobs), read with a server-side `type=Warning` field selector.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubetrain.checks import FAIL, OK, WARN, Check
from kubetrain.jobs.targets import PYTORCHJOB, Target
from kubetrain.kube.errors import ApiError, Forbidden, InternalError, NotFound, api_message
from kubetrain.kube.objects import meta_of, parse_time
from kubetrain.kube.rest import Rest

TRAINING_GROUPS = {"kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io"}
KINDS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
PROBE_NAME = "kubetrain-doctor-probe"


TOPIC = "webhooks"


def covers_training(webhook: dict[str, Any]) -> bool:
    groups = {g for rule in webhook.get("rules") or [] for g in rule.get("apiGroups") or []}
    return "*" in groups or bool(groups & TRAINING_GROUPS)


def training_webhooks(rest: Rest) -> list[tuple[str, dict[str, Any]]]:
    """(kind, webhook) for every webhook covering a training API; [] when we may not list them."""
    found = []
    for kind in KINDS:
        try:
            items = rest.get(f"/apis/admissionregistration.k8s.io/v1/{kind}").get("items") or []
        except (Forbidden, NotFound):
            continue
        found += [(kind, hook) for item in items for hook in item.get("webhooks") or [] if covers_training(hook)]
    return found


def ready_endpoints(rest: Rest, namespace: str, service: str) -> int | None:
    """Ready endpoints of a Service (EndpointSlices); None when we may not read them."""
    try:
        body = rest.get(f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                        labelSelector=f"kubernetes.io/service-name={service}")
    except (Forbidden, NotFound):
        return None
    return sum(1 for s in body.get("items") or [] for e in s.get("endpoints") or []
               if (e.get("conditions") or {}).get("ready", True))


def backend_check(rest: Rest, webhook: dict[str, Any]) -> Check | None:
    """A webhook whose Service has no ready endpoint; None when it has one (or is a URL)."""
    service = (webhook.get("clientConfig") or {}).get("service")
    if not service:
        return None
    ready = ready_endpoints(rest, service.get("namespace", ""), service.get("name", ""))
    if ready is None or ready > 0:
        return None
    fails = (webhook.get("failurePolicy") or "Fail") == "Fail"
    where = f"{service.get('namespace')}/{service.get('name')}"
    return Check(TOPIC, FAIL if fails else WARN,
                 f"webhook {webhook.get('name')}: its Service {where} has no ready endpoint"
                 + ("; creates it covers are refused" if fails else " (failurePolicy Ignore: skipped)"),
                 f"kubectl -n {service.get('namespace')} get pods,endpointslices; is the operator running?")


def probe(rest: Rest, namespace: str, target: Target = PYTORCHJOB) -> Check | None:
    """Dry-run create a minimal job: a webhook 500 shows here exactly as it would on submit."""
    body = {"apiVersion": target.api_version, "kind": target.kind,
            "metadata": {"name": PROBE_NAME, "namespace": namespace},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "pytorch", "image": "busybox"}]}}}}}}
    path = f"/apis/{target.group}/{target.version}/namespaces/{namespace}/{target.plural}"
    try:
        rest.json("POST", path, {"dryRun": "All"}, body)
    except InternalError as exc:
        message = api_message(exc)
        if "failed calling webhook" in message:
            return Check(TOPIC, FAIL, f"creating a {target.kind} fails: {message}",
                                "the webhook's backend is down or broken: check the operator's pods and logs")
    except ApiError:
        return None  # any other refusal: the webhooks answered
    return None


RECENT = dt.timedelta(hours=1)


def _when(event: dict[str, Any]) -> dt.datetime | None:
    stamp = event.get("lastTimestamp") or event.get("eventTime") or meta_of(event).get(
        "creationTimestamp")
    return parse_time(stamp)


def recent_failures(events: list[dict[str, Any]], now: dt.datetime) -> Check | None:
    """Warn on webhook-call failures recorded as Events in the last hour (pure: the verdict)."""
    hits = [e for e in events if "failed calling webhook" in str(e.get("message", ""))
            and (when := _when(e)) is not None and now - when <= RECENT]
    if not hits:
        return None
    last = max(hits, key=lambda e: _when(e) or now)
    obj = last.get("involvedObject") or {}
    count = sum(int(e.get("count") or 1) for e in hits)
    return Check(TOPIC, WARN, f"{count} webhook failure(s) in the last hour, latest on "
                        f"{obj.get('kind')}/{obj.get('name')}: {last.get('reason')}: {last.get('message')}",
                        "kubectl get events --field-selector type=Warning; check the webhook's operator")


def recent_failure_check(rest: Rest, namespace: str) -> Check | None:
    try:
        body = rest.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector="type=Warning")
    except (Forbidden, NotFound):
        return None
    return recent_failures(body.get("items") or [], dt.datetime.now(dt.UTC))


def webhook_checks(rest: Rest, namespace: str, installed: list[Target]) -> list[Check]:
    hooks = training_webhooks(rest)
    checks = [c for _, hook in hooks if (c := backend_check(rest, hook)) is not None]
    if PYTORCHJOB in installed and (failed := probe(rest, namespace)) is not None:
        checks.append(failed)
    if (recent := recent_failure_check(rest, namespace)) is not None:
        checks.append(recent)
    if not checks:
        names = ", ".join(str(h.get("name")) for _, h in hooks) or "none"
        checks.append(Check(TOPIC, OK, f"admission webhooks for the training APIs answer ({names})"))
    return checks
