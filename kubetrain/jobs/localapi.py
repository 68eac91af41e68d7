"""A local etcd + kube-apiserver for `validate --exact`, started once and reused while warm (envtest-style).

One server per Kubernetes minor version lives under kubetrain's cache dir (`apiserver/<version>/`): its
ports, token and process ids in `state.json`. A start holds `start.lock` (so two `validate` runs start one
server); every run holds `use.lock` shared while it talks to the server. A detached reaper process stops the
server once no run has used it for the idle timeout ($KUBETRAIN_APISERVER_IDLE seconds, default 600), and
`kubetrain validate --stop-server` stops it at once. The API server writes its own self-signed serving
certificate into its --cert-dir (which we then trust), and we authenticate with a static token
(--token-auth-file), so no certificate code is needed here; the service-account signing key (required by the
API server) is made by the `openssl` command once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubetrain.cachedir import cache_dir
from kubetrain.errors import ClusterError, UsageError
from kubetrain.kube.errors import ApiError, Conflict, Unreachable
from kubetrain.kube.kubeconfig import Endpoint
from kubetrain.kube.rest import Rest

SERVER_BINARIES = ("etcd", "kube-apiserver")
IDLE_ENV = "KUBETRAIN_APISERVER_IDLE"
DEFAULT_IDLE = 600.0
START_DEADLINE = 90.0  # seconds; the 2-core CI machine under load needs ~10 s, a laptop 3-5 s
ENVTEST_DATA = Path("kubebuilder-envtest") / "k8s"
# Start-up work a dry-run-only server does not need, none of which changes a verdict: API priority and fairness
# (its config producer and controllers; a single client), the watch cache (nothing watches), etcd count polling
# and compaction.
LEAN_FLAGS = ("--enable-priority-and-fairness=false", "--watch-cache=false",
              "--etcd-count-metric-poll-period=0", "--etcd-compaction-interval=0")
GET_BINARIES = ("pass --server-binaries DIR (a directory holding etcd and kube-apiserver), set KUBEBUILDER_ASSETS, "
                "or install them with `setup-envtest use {version}` (see docs/validate.md, \"Exact mode\")")


class ServerBinariesMissing(UsageError):
    """No etcd and kube-apiserver were found (exit 2)."""


class LocalServerError(ClusterError):
    """The local API server did not start or stopped answering."""


def minor_of(version: str) -> str:
    """'v1.36.3', '1.36' -> '1.36'."""
    return ".".join(version.lstrip("v").split(".")[:2])


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) and (directory / name).is_file() for name in SERVER_BINARIES)


def _version_key(name: str) -> tuple[int, ...]:
    digits = name.lstrip("v").split("-")[0].split(".")
    return tuple(int(d) for d in digits if d.isdigit())


def _versioned_dirs(root: Path, version: str, suffix: str = "") -> list[Path]:
    """`root/<x.y.z><suffix>` directories of the minor version, newest first (setup-envtest's and the test
    environment's layouts)."""
    if not root.is_dir():
        return []
    found = [d for d in root.iterdir() if d.name.endswith(suffix) and minor_of(d.name) == minor_of(version)]
    return sorted(found, key=lambda d: _version_key(d.name), reverse=True)


def candidate_dirs(explicit: str | None, version: str) -> list[Path]:
    """Where etcd and kube-apiserver may be, in order: --server-binaries, $KUBEBUILDER_ASSETS, setup-envtest's
    store (~/.local/share/kubebuilder-envtest/k8s/<version>-linux-amd64), the kubetrain test environment's
    cache ($KUBETRAIN_TESTENV_CACHE, else ~/.cache/kubetrain/testenv: <version>/bin)."""
    if explicit:
        return [Path(explicit)]
    dirs = [Path(os.environ["KUBEBUILDER_ASSETS"])] if os.environ.get("KUBEBUILDER_ASSETS") else []
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    dirs += _versioned_dirs(data / ENVTEST_DATA, version, "-linux-amd64")
    xdg_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    testenv = Path(os.environ.get("KUBETRAIN_TESTENV_CACHE") or xdg_cache / "kubetrain" / "testenv")
    dirs += [d / "bin" for d in _versioned_dirs(testenv, version)]
    return dirs


def find_binaries(explicit: str | None, version: str) -> Path:
    """The first directory holding both binaries; one clear line when there is none."""
    for directory in candidate_dirs(explicit, version):
        if _has_binaries(directory):
            return directory
    if explicit:
        raise ServerBinariesMissing(f"--server-binaries {explicit}: needs executable etcd and kube-apiserver there")
    raise ServerBinariesMissing(f"validate --exact: no etcd and kube-apiserver for Kubernetes {minor_of(version)} "
                                f"found; {GET_BINARIES.format(version=minor_of(version) + '.x')}")


@dataclass(frozen=True)
class ServerState:
    port: int
    token: str
    pids: dict[str, int]
    version: str
    binaries: str

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def state_dir(version: str) -> Path:
    return cache_dir() / "apiserver" / minor_of(version)


def idle_timeout() -> float:
    try:
        return float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE)
    except ValueError:
        raise UsageError(f"${IDLE_ENV} must be a number of seconds, not {os.environ[IDLE_ENV]!r}") from None


class LocalApiServer:
    """The warm server of one version: `with LocalApiServer(...).using() as rest:` gives a client to it,
    starting it first when it is not running."""

    def __init__(self, version: str, binaries: str | None = None, lean: bool = True) -> None:
        self.version, self.lean = version, lean
        self.explicit = binaries
        self.dir = state_dir(version)
        self.state: ServerState | None = None
        self.started = False  # this run started it (cold)

    @contextlib.contextmanager
    def using(self) -> Iterator[Rest]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with flocked(self.dir / "start.lock", fcntl.LOCK_EX):
            rest = self._reuse() or self._start()
        with flocked(self.dir / "use.lock", fcntl.LOCK_SH):
            _touch(self.dir / "last-used")
            try:
                yield rest
            finally:
                _touch(self.dir / "last-used")

    def _reuse(self) -> Rest | None:
        state = read_state(self.dir)
        core = [pid for name, pid in state.pids.items() if name in (*SERVER_BINARIES, "reaper")] if state else []
        if state is None or len(core) < 3 or not all(alive(pid) for pid in core):
            return None
        rest = _client(self.dir, state)
        try:
            rest.request("GET", "/readyz", retry=False)
        except (ApiError, Unreachable):
            return None
        self.state = state
        return rest

    def _start(self) -> Rest:
        stop_server(self.dir, locked=True)
        binaries = find_binaries(self.explicit, self.version)
        for stale in ("etcd", "certs"):
            shutil.rmtree(self.dir / stale, ignore_errors=True)
        (self.dir / "crds.json").unlink(missing_ok=True)  # the new etcd holds none
        (self.dir / "logs").mkdir(exist_ok=True)
        token = secrets.token_hex(24)
        write_private(self.dir / "token.csv", f'{token},kubetrain,kubetrain,"system:masters"\n')
        _service_account_key(self.dir)
        etcd_port, peer_port, port = free_ports(3)
        apiserver = _apiserver_argv(binaries, self.dir, etcd_port, port, self.lean)
        pids = {"etcd": self._spawn("etcd", _etcd_argv(binaries, self.dir, etcd_port, peer_port)),
                "kube-apiserver": self._spawn("kube-apiserver", apiserver)}
        state = ServerState(port, token, pids, _binary_version(binaries), str(binaries))
        self._wait_ready(state)
        pids["reaper"] = _spawn_reaper(self.dir)
        state = ServerState(port, token, pids, state.version, state.binaries)
        write_private(self.dir / "state.json", json.dumps(state.__dict__))
        self.state, self.started = state, True
        return _client(self.dir, state)

    def _spawn(self, name: str, argv: list[str]) -> int:
        with open(self.dir / "logs" / f"{name}.log", "ab") as log:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir,
                                       start_new_session=True)  # survives this run; the reaper stops it
        return process.pid

    def _wait_ready(self, state: ServerState) -> None:
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            for name, pid in state.pids.items():
                if not alive(pid):
                    kill_all(state.pids)
                    raise LocalServerError(f"the local {name} exited at start: {log_tail(self.dir, name)}")
            if (self.dir / "certs" / "apiserver.crt").is_file():
                with contextlib.suppress(ApiError, Unreachable, OSError):
                    if _client(self.dir, state, timeout=2).request("GET", "/readyz", retry=False).data == b"ok":
                        return
            time.sleep(0.05)
        kill_all(state.pids)
        raise LocalServerError(f"the local kube-apiserver was not ready after {START_DEADLINE:.0f} s: "
                               f"{log_tail(self.dir, 'kube-apiserver')}")


def install_crds(rest: Rest, directory: Path, crds: list[dict[str, Any]]) -> list[str]:
    """Create (or replace) every CRD the server does not have as given, and wait until each is served.
    `crds.json` remembers what is installed, so a warm run sends nothing. Returns the names installed now."""
    record_path = directory / "crds.json"
    try:
        record: dict[str, str] = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    installed = []
    for crd in crds:
        name = str((crd.get("metadata") or {}).get("name") or "")
        digest = hashlib.sha256(json.dumps(crd, sort_keys=True, default=str).encode()).hexdigest()
        if not name or record.get(name) == digest:
            continue
        _put_crd(rest, name, crd)
        record[name] = digest
        installed.append(name)
    for name in installed:
        _wait_established(rest, name)
    if installed:
        write_private(record_path, json.dumps(record))
    return installed


def crd_installer(rest: Rest, directory: Path, crds: list[dict[str, Any]]) -> Callable[[str, str], bool]:
    """(apiVersion, kind) -> installs the CRD among `crds` that serves it unless the server has it as given
    (True when one was installed now)."""
    by_kind = {(f"{(crd.get('spec') or {}).get('group')}/{version.get('name')}",
                ((crd.get("spec") or {}).get("names") or {}).get("kind")): crd
               for crd in crds for version in (crd.get("spec") or {}).get("versions") or [] if version.get("served")}

    def install(api_version: str, kind: str) -> bool:
        crd = by_kind.get((api_version, kind))
        return crd is not None and bool(install_crds(rest, directory, [crd]))

    return install


def _put_crd(rest: Rest, name: str, crd: dict[str, Any]) -> None:
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    body = {k: v for k, v in crd.items() if k != "status"}
    body["metadata"] = {k: v for k, v in (crd.get("metadata") or {}).items()
                        if k in ("name", "labels", "annotations")}
    try:
        rest.json("POST", path, None, body)
    except Conflict:
        current = rest.get(f"{path}/{name}")
        body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        rest.json("PUT", f"{path}/{name}", None, body)
    except ApiError as exc:
        raise LocalServerError(f"the local API server refused the CRD {name}: {_status_message(exc)}") from None


def _wait_established(rest: Rest, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            spec = crd.get("spec") or {}
            served = [v["name"] for v in spec.get("versions", []) if v.get("served")]
            if all(_discoverable(rest, spec.get("group"), v, spec.get("names", {}).get("plural")) for v in served):
                return
        time.sleep(0.05)
    raise LocalServerError(f"the CRD {name} was not established on the local API server within 30 s")


def api_resources(rest: Rest, group_version: str) -> list[dict[str, Any]]:
    """The resources the server's discovery lists for `group/version` ([] while it lists none)."""
    try:
        return list(rest.get(f"/apis/{group_version}").get("resources", []))
    except ApiError:
        return []


def _discoverable(rest: Rest, group: Any, version: str, plural: Any) -> bool:
    return any(r.get("name") == plural for r in api_resources(rest, f"{group}/{version}"))


def _status_message(exc: ApiError) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason)


def _client(directory: Path, state: ServerState, timeout: float = 30.0) -> Rest:
    endpoint = Endpoint(server=state.server, context="local kube-apiserver", namespace="default",
                        ca_file=str(directory / "certs" / "apiserver.crt"), token=state.token)
    return Rest(endpoint, request_timeout=timeout)


def _etcd_argv(binaries: Path, directory: Path, port: int, peer: int) -> list[str]:
    client, peer_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
    return [str(binaries / "etcd"), "--name=kubetrain-validate", f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}", f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}", f"--initial-cluster=kubetrain-validate={peer_url}",
            "--unsafe-no-fsync=true", "--log-level=error"]


def _apiserver_argv(binaries: Path, directory: Path, etcd_port: int, port: int, lean: bool = True) -> list[str]:
    return [str(binaries / "kube-apiserver"), *(LEAN_FLAGS if lean else ()), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            # No endpoint reconciler: 1.37 refuses to start with a loopback address for the `kubernetes` Service.
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
            f"--secure-port={port}",
            f"--cert-dir={directory / 'certs'}", f"--token-auth-file={directory / 'token.csv'}",
            "--authorization-mode=RBAC", "--allow-privileged=true", "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={directory / 'sa.pub'}",
            f"--service-account-signing-key-file={directory / 'sa.key'}",
            # Whether a pod's ServiceAccount exists is cluster state, not validity (no controller makes
            # "default" here); every other default admission plugin (Priority, PodSecurity, ...) runs.
            "--disable-admission-plugins=ServiceAccount",
            "--profiling=false", "--v=0"]


def _service_account_key(directory: Path) -> None:
    if (directory / "sa.key").is_file() and (directory / "sa.pub").is_file():
        return
    if shutil.which("openssl") is None:
        raise LocalServerError("validate --exact needs the `openssl` command once, to make the local API "
                               "server's service-account key")
    key = directory / "sa.key"
    for argv in (["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key)],
                 ["openssl", "ec", "-in", str(key), "-pubout", "-out", str(directory / "sa.pub")]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LocalServerError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()[:200]}")
    key.chmod(0o600)


def _binary_version(binaries: Path) -> str:
    done = subprocess.run([str(binaries / "kube-apiserver"), "--version"], capture_output=True, text=True,
                          check=False, timeout=30)
    return done.stdout.strip().removeprefix("Kubernetes ") or "unknown"


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _spawn_reaper(directory: Path) -> int:
    argv = [sys.executable, "-m", "kubetrain.jobs.localapi", str(directory), str(idle_timeout())]
    with open(directory / "logs" / "reaper.log", "ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True).pid


def read_state(directory: Path) -> ServerState | None:
    try:
        data: dict[str, Any] = json.loads((directory / "state.json").read_text())
        return ServerState(int(data["port"]), str(data["token"]), {k: int(v) for k, v in data["pids"].items()},
                           str(data["version"]), str(data["binaries"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def stop_server(directory: Path, locked: bool = False) -> bool:
    """Stop the server of `directory`; False when none was running."""
    with contextlib.nullcontext() if locked else flocked(directory / "start.lock", fcntl.LOCK_EX):
        state = read_state(directory)
        with contextlib.suppress(FileNotFoundError):
            (directory / "state.json").unlink()
        if state is None:
            return False
        pids = {k: v for k, v in state.pids.items() if k != "reaper" or v != os.getpid()}
        # SIGKILL at once: its etcd data is deleted next, and kube-apiserver's graceful termination can stall
        # for over 10 s after "quota evaluator worker shutdown" once clients have come and gone.
        kill_all(pids, grace=0.0)
        shutil.rmtree(directory / "etcd", ignore_errors=True)
        return True


def stop_all() -> list[str]:
    """Stop every version's server; returns the versions that were running."""
    root = cache_dir() / "apiserver"
    return [d.name for d in sorted(root.iterdir()) if d.is_dir() and stop_server(d)] if root.is_dir() else []


def kill_all(pids: dict[str, int], grace: float = 10.0) -> None:
    """SIGTERM to each process group, SIGKILL to those still alive after `grace` seconds (at once when 0)."""
    for pid in pids.values() if grace else ():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)  # each runs in a session (and process group) of its own
    deadline = time.monotonic() + grace
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids.values():
        if alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10  # SIGKILL is not instant on a loaded machine: return once they are gone
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own child if it exited (else it stays a zombie)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def log_tail(directory: Path, name: str) -> str:
    try:
        lines = (directory / "logs" / f"{name}.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return (lines[-1][:300] if lines else "(empty log)") + f" (log: {directory / 'logs' / (name + '.log')})"


@contextlib.contextmanager
def flocked(path: Path, mode: int) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _touch(path: Path) -> None:
    path.touch()
    os.utime(path)


def write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)


def reap(directory: Path, idle: float) -> None:
    """The reaper's loop: stop the server once nobody used it for `idle` seconds (and no run holds use.lock),
    or as soon as the API server or etcd is gone."""
    while True:
        time.sleep(max(0.2, min(idle / 10, 5.0)))
        state = read_state(directory)
        if state is None or state.pids.get("reaper") not in (None, os.getpid()):
            return  # stopped, or replaced by a newer server with a reaper of its own
        servers = {k: v for k, v in state.pids.items() if k in SERVER_BINARIES}  # the webhooks' managers do not count
        try:
            last = (directory / "last-used").stat().st_mtime
        except OSError:
            last = 0.0
        if all(alive(pid) for pid in servers.values()) and time.time() - last < idle:
            continue
        with open(directory / "use.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a run is using it right now
            stop_server(directory)
            return


if __name__ == "__main__":
    reap(Path(sys.argv[1]), float(sys.argv[2]))
