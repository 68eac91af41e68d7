"""`kubetrain gpu`: nvidia-smi in every running pod of a job, as one table. Exec is the only cluster call;
parsing and the per-pod verdicts are pure functions, tested on their own."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kubetrain.jobs import devices
from kubetrain.jobs.pods import Replica, job_replicas, select
from kubetrain.jobs.targets import Target
from kubetrain.kube.errors import ApiError, Forbidden, TimedOut, Unauthorized, cluster_errors, translate
from kubetrain.kube.objects import JOB_LABEL
from kubetrain.kube.podexec import exec_in_pod
from kubetrain.kube.rest import Rest

FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu", "power.draw",
          "mig.mode.current")
COMMAND = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits"]
# With MIG enabled, --query-gpu lists only the parent GPUs (utilization [N/A]: NVML has no per-GPU figure);
# the slices the pod was given are listed by -L, indented under their parent.
LIST_COMMAND = ["nvidia-smi", "-L"]
_GPU_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)\s*$")
EXEC_TIMEOUT = 20.0  # seconds for one pod's nvidia-smi
PARALLEL_EXECS = 16
NOT_FOUND = ("executable file not found", "no such file or directory", "not found in $path", "command not found")
NO_DRIVER = ("couldn't communicate with the nvidia driver", "no devices were found", "nvml",
             "driver/library version mismatch")


@dataclass(frozen=True)
class MigSlice:
    """One MIG device (a GPU instance's compute instance) of a parent GPU, as `nvidia-smi -L` lists it."""

    device: int
    profile: str  # e.g. 1g.10gb
    uuid: str


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    utilization: float | None  # percent
    memory_used: float | None  # MiB
    memory_total: float | None  # MiB
    temperature: float | None  # °C
    power: float | None  # W
    mig: bool = False  # MIG mode enabled: utilization is not reported, `slices` are what the pod can use
    slices: tuple[MigSlice, ...] = ()


@dataclass(frozen=True)
class PodGpus:
    """One pod's GPUs, or why there are none to show (`message`)."""

    replica: str
    pod: str
    node: str | None
    gpus: list[Gpu] = field(default_factory=list)
    message: str = ""
    devices: tuple[str, ...] = ()  # DRA: driver/pool/device of each device allocated to the pod's claims

    def as_dict(self) -> dict[str, Any]:
        return {"replica": self.replica, "pod": self.pod, "node": self.node,
                "gpus": [{**asdict(g), "slices": [asdict(s) for s in g.slices]} for g in self.gpus],
                "devices": list(self.devices), "message": self.message or None}


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None: the command did not run (see error)
    error: str = ""  # the exec's failure Status message, if any
    timed_out: bool = False  # the pod's kubelet did not answer the exec in time (kube.errors.TimedOut)


def _number(cell: str) -> float | None:
    """'87' → 87.0; '[N/A]', '[Not Supported]', '' → None."""
    try:
        return float(cell)
    except ValueError:
        return None


def parse_query(text: str) -> list[Gpu]:
    """The rows of `nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits`; ValueError if it is not that."""
    gpus = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(FIELDS) or not cells[0].isdigit():
            raise ValueError(f"unexpected nvidia-smi output: {line[:120]!r}")
        utilization, used, total, temperature, power = (_number(c) for c in cells[2:-1])
        gpus.append(Gpu(int(cells[0]), cells[1], utilization, used, total, temperature, power,
                        mig=cells[-1] == "Enabled"))
    return gpus


def parse_list(text: str) -> dict[int, tuple[MigSlice, ...]]:
    """The MIG devices of `nvidia-smi -L`, by parent GPU index; ValueError on a line of another shape."""
    slices: dict[int, list[MigSlice]] = {}
    parent: int | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if gpu := _GPU_LINE.match(line):
            parent = int(gpu.group(1))
            slices.setdefault(parent, [])
        elif (mig := _MIG_LINE.match(line)) and parent is not None:
            slices[parent].append(MigSlice(int(mig.group(2)), mig.group(1), mig.group(3)))
        else:
            raise ValueError(f"unexpected nvidia-smi -L output: {line[:120]!r}")
    return {index: tuple(found) for index, found in slices.items()}


def with_slices(gpus: list[Gpu], listing: str) -> list[Gpu]:
    """`gpus` with the MIG slices of `nvidia-smi -L` attached to their parents."""
    slices = parse_list(listing)
    return [replace(g, slices=slices.get(g.index, ())) if g.mig else g for g in gpus]


def verdict(result: ExecResult) -> tuple[list[Gpu], str]:
    """(GPUs, "") when nvidia-smi worked, else ([], a message saying what is wrong and what to do)."""
    everything = " ".join((result.stdout, result.stderr, result.error)).lower()
    if result.exit_code in (126, 127) or (any(s in everything for s in NOT_FOUND) and result.exit_code != 0):
        return [], ("nvidia-smi not found in the container: the image has no NVIDIA utilities, or the pod got no "
                    "GPU runtime (request nvidia.com/gpu; on kind use runtimeClassName nvidia)")
    if result.exit_code != 0 and any(s in everything for s in NO_DRIVER):
        return [], f"no GPU visible in the pod: {_first_line(result.stdout + result.stderr or result.error)}"
    if result.exit_code != 0:
        detail = _first_line(result.stderr or result.stdout or result.error) or "no output"
        return [], f"nvidia-smi failed (exit {result.exit_code}): {detail}"
    try:
        gpus = parse_query(result.stdout)
    except ValueError as exc:
        return [], str(exc)
    return (gpus, "") if gpus else ([], "nvidia-smi lists no GPU in this pod")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:200]


def exec_nvidia_smi(rest: Rest, namespace: str, pod: str, container: str,
                    command: list[str] = COMMAND, timeout: float = EXEC_TIMEOUT) -> ExecResult:
    """Run `command` (COMMAND; LIST_COMMAND for MIG slices), nvidia-smi, in the container."""
    return exec_command(rest, namespace, pod, container, command, timeout)


def exec_command(rest: Rest, namespace: str, pod: str, container: str, command: list[str],
                 timeout: float = EXEC_TIMEOUT) -> ExecResult:
    """Run a command in the container over the exec WebSocket; stdout, stderr and the exit code kept apart."""
    output = exec_in_pod(rest, namespace, pod, container, command, timeout)
    return _result(output.stdout, output.stderr, output.status, not output.finished, command[0])


def _result(out: str, err: str, status_text: str, still_open: bool, what: str = "nvidia-smi") -> ExecResult:
    if still_open:
        return ExecResult(out, err, None, f"{what} did not finish in time")
    try:
        status = json.loads(status_text) if status_text else {}
    except ValueError:
        status = {"message": status_text}
    if not status or status.get("status") == "Success":
        return ExecResult(out, err, 0)
    causes = (status.get("details") or {}).get("causes") or []
    code = next((int(c["message"]) for c in causes if c.get("reason") == "ExitCode"
                 and str(c.get("message", "")).isdigit()), None)
    return ExecResult(out, err, code, "" if code is not None else str(status.get("message") or status_text))


Exec = Callable[..., ExecResult]  # exec_nvidia_smi's signature


def pod_gpus(rest: Rest, namespace: str, replica: Replica, run: Exec = exec_nvidia_smi,
             allocated: tuple[str, ...] = ()) -> PodGpus:
    """One pod's row: skipped with a message when it is not running. A pod that requests no GPU is asked too:
    the answer is then said plainly ("no GPU"), and GPUs it sees anyway (an image's NVIDIA_VISIBLE_DEVICES=all
    on a node whose default runtime is nvidia's) are shown with a warning. `allocated`: the devices DRA gave
    the pod's claims."""
    base = PodGpus(replica.label, replica.pod, replica.node, devices=allocated)
    if replica.phase != "Running" or replica.state != "running":
        return replace(base, message=f"not running ({replica.reason or replica.phase})")
    gpus, message = verdict(exec_replica(rest, namespace, replica, run))
    if any(g.mig for g in gpus):
        gpus, message = _mig_slices(gpus, exec_replica(rest, namespace, replica, run, LIST_COMMAND))
    if replica.gpus == 0 and not allocated:
        message = (f"requests no nvidia.com/gpu, yet sees {len(gpus)} GPU(s)" if gpus
                   else f"no GPU: the pod requests no nvidia.com/gpu ({_no_gpu_reason(message)})")
    return replace(base, gpus=gpus, message=message)


def _mig_slices(gpus: list[Gpu], listing: ExecResult) -> tuple[list[Gpu], str]:
    """The GPUs with their MIG slices, or unchanged with why the slices are not known."""
    if listing.exit_code != 0:
        detail = _first_line(listing.stderr or listing.stdout or listing.error) or "no output"
        return gpus, f"MIG enabled, but nvidia-smi -L failed (exit {listing.exit_code}): {detail}"
    try:
        return with_slices(gpus, listing.stdout), ""
    except ValueError as exc:
        return gpus, f"MIG enabled: {exc}"


def _no_gpu_reason(message: str) -> str:
    """What the container said, short: the long hints are for pods that asked for GPUs."""
    if message.startswith("nvidia-smi not found"):
        return "checked in the container: no nvidia-smi"
    return f"checked in the container: {message}"


def exec_replica(rest: Rest, namespace: str, replica: Replica, run: Exec,
                 command: list[str] | None = None) -> ExecResult:
    """run() in the replica's container: a denied exec is an error, any other failure this pod's result."""
    try:
        if command is not None:
            return run(rest, namespace, replica.pod, replica.container, command)
        return run(rest, namespace, replica.pod, replica.container)
    except (Unauthorized, Forbidden) as exc:
        raise translate(exc, f"exec into pod {replica.pod} in namespace {namespace} (pods/exec)") from None
    except ApiError as exc:
        return ExecResult("", "", None, f"{exc.status} {exc.reason}")
    except TimedOut as exc:
        return ExecResult("", "", None, str(exc), timed_out=True)
    except Exception as exc:  # one pod's broken exec must not hide the others
        return ExecResult("", "", None, f"{type(exc).__name__}: {exc}")


def job_gpus(rest: Rest, target: Target, namespace: str, name: str, replica: str = "all",
             run: Exec = exec_nvidia_smi) -> list[PodGpus]:
    """nvidia-smi in every selected pod, in parallel; master first."""
    replicas = select(job_replicas(rest, target, namespace, name), replica)
    allocated = claimed_devices(rest, namespace, name, replicas)
    with cluster_errors(f"exec nvidia-smi in the pods of {name} in namespace {namespace}"), \
            ThreadPoolExecutor(min(PARALLEL_EXECS, max(1, len(replicas)))) as pool:
        return list(pool.map(lambda r: pod_gpus(rest, namespace, r, run, allocated.get(r.pod, ())), replicas))


def claimed_devices(rest: Rest, namespace: str, name: str, replicas: list[Replica]) -> dict[str, tuple[str, ...]]:
    """pod -> the DRA devices allocated to its ResourceClaims (none when no pod claims any, or the claims
    cannot be read)."""
    if not any((r.obj.get("spec") or {}).get("resourceClaims") for r in replicas):
        return {}
    try:
        claims = {str(c["metadata"]["name"]): c for c in devices.job_claims(rest, namespace, f"{JOB_LABEL}={name}")}
    except ApiError:
        return {}
    out = {}
    for r in replicas:
        statuses = (r.obj.get("status") or {}).get("resourceClaimStatuses") or []
        out[r.pod] = tuple(d for s in statuses if (c := claims.get(str(s.get("resourceClaimName"))))
                           for d in devices.allocated_devices(c))
    return out


def table_rows(results: list[PodGpus]) -> list[list[str]]:
    """POD, GPU, NAME, UTIL, MEMORY, TEMP, POWER rows; a pod without GPUs gets one row of dashes (its
    message is among the `notes`)."""
    rows = []
    for pod in results:
        if not pod.gpus:
            rows.append([pod.replica, *["-"] * (len(HEADERS) - 1)])
        for gpu in pod.gpus:
            rows.append([pod.replica, str(gpu.index), gpu.name, _utilization(gpu), _memory(gpu),
                         _fmt(gpu.temperature, "°C"), _fmt(gpu.power, " W", 0)])
            rows += [[pod.replica, f"{gpu.index}/{s.device}", f"MIG {s.profile} {s.uuid}", "", "", "", ""]
                     for s in gpu.slices]
    return rows


HEADERS = ["POD", "GPU", "NAME", "UTIL", "MEMORY", "TEMP", "POWER"]


def _utilization(gpu: Gpu) -> str:
    """nvidia-smi reports [N/A] for a GPU in MIG mode and [Not Supported] on some boards: say so."""
    if gpu.utilization is not None:
        return _fmt(gpu.utilization, "%")
    return "not supported (MIG)" if gpu.mig else "not supported"


def notes(results: list[PodGpus]) -> list[str]:
    """"worker-0: not running (Completed)": what a pod's row cannot say, one line per pod that has a message."""
    lines = [f"{pod.replica}: {pod.message}" for pod in results if pod.message]
    return lines + [f"{pod.replica}: DRA devices {', '.join(pod.devices)}" for pod in results if pod.devices]


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def _memory(gpu: Gpu) -> str:
    if gpu.memory_used is None or gpu.memory_total is None:
        return "n/a"
    return f"{gpu.memory_used / 1024:.1f}/{gpu.memory_total / 1024:.1f} GiB"
