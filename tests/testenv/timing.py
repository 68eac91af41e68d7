"""pytest plugin: where a run's time went, written at the end of every run.

Per test module its wall time (set-up, call and teardown of its tests, so a shared fixture counts where it was
paid), per fixture of session/package/module/class scope each set-up and teardown with the modules that used it,
function-scoped fixtures summed by name, the critical path (the process that ran longest, under pytest-xdist the
slowest worker) and CPU busy against waiting: this run's CPU (pytest and the children it waited for, from
`os.times()`) against the wall time, and the whole machine's from /proc/stat (which also counts pods' processes
under containerd and anything else running).

The report goes to `$KUBETRAIN_TIMING_REPORT` (JSON, a `.txt` of the same text beside it), else to
`.pytest_cache/d/kubetrain-timing/` when the cache plugin is on; a short summary ends the terminal output.
Under pytest-xdist each worker writes its part into a directory the controller names; the controller merges them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPORT_ENV = "KUBETRAIN_TIMING_REPORT"
PARTS_KEY = "kubetrain_timing_parts"
SHOWN = 8  # lines per section in the terminal summary


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def machine_cpu() -> dict[str, float] | None:
    """Jiffies of all CPUs since boot from /proc/stat, in seconds; None off Linux."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    hz = os.sysconf("SC_CLK_TCK")
    return {"busy_s": (user + nice + system + irq + softirq + steal) / hz, "idle_s": idle / hz,
            "iowait_s": iowait / hz}


def process_cpu() -> dict[str, float]:
    t = os.times()
    return {"self_s": t.user + t.system, "children_s": t.children_user + t.children_system}


@dataclass
class ModuleTime:
    module: str
    tests: int = 0
    setup_s: float = 0.0
    call_s: float = 0.0
    teardown_s: float = 0.0
    first_start: float = 0.0

    @property
    def total_s(self) -> float:
        return self.setup_s + self.call_s + self.teardown_s


@dataclass
class FixtureTime:
    name: str
    scope: str
    defined_in: str
    paid_by: str  # the module whose test set it up
    setup_s: float
    teardown_s: float = 0.0


@dataclass
class Part:
    """What one process (the only one, or one xdist worker) measured."""

    worker: str
    wall_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    modules: list[dict[str, Any]] = field(default_factory=list)
    fixtures: list[dict[str, Any]] = field(default_factory=list)
    function_fixtures: dict[str, dict[str, float]] = field(default_factory=dict)
    fixture_users: dict[str, list[str]] = field(default_factory=dict)


class Recorder:
    """The per-process hooks: test phases, fixture set-up and teardown, and which module asked for what."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self.started = time.monotonic()
        self.cpu_start = process_cpu()
        self.modules: dict[str, ModuleTime] = {}
        self.fixtures: list[FixtureTime] = []
        self.open: dict[int, tuple[FixtureTime, float]] = {}
        self.function_fixtures: dict[str, dict[str, float]] = defaultdict(
            lambda: {"count": 0, "setup_s": 0.0, "teardown_s": 0.0})
        self.requested: dict[str, set[str]] = defaultdict(set)  # fixture name -> modules whose tests use it
        self.teardown_started: dict[int, float] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
                             ) -> Iterator[Any]:
        start = time.monotonic()
        try:
            return (yield)
        finally:
            self._set_up(fixturedef, request, time.monotonic() - start)

    def _set_up(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest, seconds: float) -> None:
        key = id(fixturedef)
        # Finalizers run last-in first-out: this one runs before the fixture's own teardown code.
        fixturedef.addfinalizer(lambda: self.teardown_started.__setitem__(key, time.monotonic()))
        if fixturedef.scope == "function":
            entry = self.function_fixtures[fixturedef.argname]
            entry["count"] += 1
            entry["setup_s"] += seconds
            return
        item = getattr(request, "_pyfuncitem", None)
        paid_by = module_of(item.nodeid) if item is not None else request.node.nodeid
        record = FixtureTime(fixturedef.argname, fixturedef.scope, fixturedef.baseid or "(plugin)", paid_by,
                             round(seconds, 3))
        self.fixtures.append(record)
        self.open[key] = (record, seconds)

    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef[Any]) -> None:
        key = id(fixturedef)
        began = self.teardown_started.pop(key, None)
        if began is None:
            return
        seconds = time.monotonic() - began
        if fixturedef.scope == "function":
            self.function_fixtures[fixturedef.argname]["teardown_s"] += seconds
        elif key in self.open:
            record, _ = self.open.pop(key)
            record.teardown_s = round(seconds, 3)

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        for name in getattr(item, "fixturenames", ()):
            self.requested[name].add(module_of(item.nodeid))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = module_of(report.nodeid)
        entry = self.modules.get(module)
        if entry is None:
            entry = self.modules[module] = ModuleTime(module, first_start=time.monotonic() - self.started)
        # pytest-xdist reports the test a worker died in with the phase "???": it counts as the test's call.
        phase = report.when if report.when in ("setup", "teardown") else "call"
        setattr(entry, f"{phase}_s", getattr(entry, f"{phase}_s") + report.duration)
        if phase == "call" or (phase == "setup" and not report.passed):
            entry.tests += 1

    def part(self) -> Part:
        end = process_cpu()
        cpu = {k: round(end[k] - self.cpu_start[k], 3) for k in end}
        shared = {f.name for f in self.fixtures}
        return Part(
            worker=self.worker, wall_s=round(time.monotonic() - self.started, 3), cpu=cpu,
            modules=[{**asdict(m), "total_s": round(m.total_s, 3)} for m in self.modules.values()],
            fixtures=[asdict(f) for f in self.fixtures],
            function_fixtures={k: {x: round(y, 3) for x, y in v.items()} for k, v in self.function_fixtures.items()},
            fixture_users={name: sorted(self.requested[name]) for name in shared},
        )


def merge(parts: list[Part], wall_s: float, machine: dict[str, float] | None) -> dict[str, Any]:
    """One report from every process's part; the critical path is the process with the longest wall time."""
    modules = sorted((m for p in parts for m in p.modules), key=lambda m: -m["total_s"])
    fixtures = sorted((f | {"worker": p.worker, "used_by": p.fixture_users.get(f["name"], [])}
                       for p in parts for f in p.fixtures), key=lambda f: -(f["setup_s"] + f["teardown_s"]))
    functions: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "setup_s": 0.0, "teardown_s": 0.0})
    for p in parts:
        for name, entry in p.function_fixtures.items():
            for k, v in entry.items():
                functions[name][k] = round(functions[name][k] + v, 3)
    critical = max(parts, key=lambda p: p.wall_s)
    path = sorted(critical.modules, key=lambda m: m["first_start"])
    cpu = {k: round(sum(p.cpu.get(k, 0.0) for p in parts), 3) for k in ("self_s", "children_s")}
    return {
        "wall_s": round(wall_s, 3),
        "workers": len(parts),
        "cpu": cpu | {"of_one_cpu": round((cpu["self_s"] + cpu["children_s"]) / wall_s, 3) if wall_s else 0.0},
        "machine": machine,
        "critical_path": {"worker": critical.worker, "wall_s": critical.wall_s,
                          "modules": [{"module": m["module"], "total_s": m["total_s"]} for m in path]},
        "modules": modules,
        "fixtures": fixtures,
        "function_fixtures": dict(sorted(functions.items(), key=lambda kv: -kv[1]["setup_s"] - kv[1]["teardown_s"])),
    }


def machine_share(start: dict[str, float] | None, end: dict[str, float] | None) -> dict[str, float] | None:
    if start is None or end is None:
        return None
    diff = {k: end[k] - start[k] for k in start}
    total = sum(diff.values()) or 1.0
    return {"cpus": os.cpu_count() or 1, **{k: round(v, 1) for k, v in diff.items()},
            "busy_fraction": round(diff["busy_s"] / total, 3), "iowait_fraction": round(diff["iowait_s"] / total, 3)}


def summary_lines(report: dict[str, Any], limit: int = SHOWN) -> list[str]:
    wall = report["wall_s"]
    cpu = report["cpu"]
    lines = [f"wall {wall:.1f} s, {report['workers']} process(es); this run's CPU "
             f"{cpu['self_s'] + cpu['children_s']:.1f} s (pytest {cpu['self_s']:.1f} s + children "
             f"{cpu['children_s']:.1f} s) = {cpu['of_one_cpu']:.0%} of one CPU"]
    machine = report["machine"]
    if machine:
        lines.append(f"machine: {machine['cpus']} CPUs {machine['busy_fraction']:.0%} busy, "
                     f"{machine['iowait_fraction']:.0%} waiting on I/O, the rest idle (every process counted: "
                     "pods, clusters, other work)")
    critical = report["critical_path"]
    lines.append(f"critical path: {critical['worker']}, {critical['wall_s']:.1f} s over "
                 f"{len(critical['modules'])} modules")
    lines.append("slowest modules (set-up + call + teardown of their tests, shared fixtures where paid):")
    lines += [f"  {m['total_s']:8.1f} s  {m['module']} ({m['tests']} tests)" for m in report["modules"][:limit]]
    lines.append("slowest fixtures above function scope (set-up + teardown, used by N modules, paid by):")
    lines += [f"  {f['setup_s']:8.1f} s + {f['teardown_s']:.1f} s  {f['name']} ({f['scope']}, "
              f"{len(f['used_by'])} modules, paid by {f['paid_by']})" for f in report["fixtures"][:limit]]
    return lines


def full_text(report: dict[str, Any]) -> str:
    lines = summary_lines(report, limit=10**6)
    lines.append("critical path in run order:")
    lines += [f"  {m['total_s']:8.1f} s  {m['module']}" for m in report["critical_path"]["modules"]]
    lines.append("function-scoped fixtures (count, set-up, teardown):")
    lines += [f"  {v['count']:6.0f} x  {v['setup_s']:8.1f} s + {v['teardown_s']:.1f} s  {k}"
              for k, v in report["function_fixtures"].items()]
    return "\n".join(lines) + "\n"


class TimingPlugin:
    """The controller side (or the only process): merges the parts, writes the report, prints the summary."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        worker = self.workerinput["workerid"] if self.workerinput else "main"
        self.recorder = Recorder(worker)
        self.parts_dir = Path(self.workerinput[PARTS_KEY]) if self.workerinput else Path(
            tempfile.mkdtemp(prefix="kubetrain-timing-"))
        self.machine_start = machine_cpu()
        self.report: dict[str, Any] | None = None
        self.written: Path | None = None
        config.pluginmanager.register(self.recorder, "kubetrain-timing-recorder")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:  # pytest-xdist: tell each worker where its part goes
        node.workerinput[PARTS_KEY] = str(self.parts_dir)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.config.option.collectonly:
            return
        mine = self.recorder.part()
        if self.workerinput:
            (self.parts_dir / f"{mine.worker}.json").write_text(json.dumps(asdict(mine)))
            return
        parts = self._worker_parts() or [mine]
        self.report = merge(parts, mine.wall_s, machine_share(self.machine_start, machine_cpu()))
        self.written = self._write(self.report)
        for leftover in self.parts_dir.glob("*.json"):
            leftover.unlink()
        self.parts_dir.rmdir()

    def _worker_parts(self) -> list[Part]:
        return [Part(**json.loads(p.read_text())) for p in sorted(self.parts_dir.glob("*.json"))]

    def _write(self, report: dict[str, Any]) -> Path | None:
        target = os.environ.get(REPORT_ENV)
        cache = getattr(self.config, "cache", None)
        if target:
            path = Path(target)
        elif cache is not None:
            path = cache.mkdir("kubetrain-timing") / "report.json"
        else:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n")
        path.with_suffix(".txt").write_text(full_text(report))
        return path

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None:
            return
        terminalreporter.write_sep("=", "where the time went (tests/testenv/timing.py)")
        for line in summary_lines(self.report):
            terminalreporter.write_line(line)
        where = str(self.written) if self.written else f"not written: set {REPORT_ENV} or enable the cache plugin"
        terminalreporter.write_line(f"full report: {where}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TimingPlugin(config), "kubetrain-timing")
