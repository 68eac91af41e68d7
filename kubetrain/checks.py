"""The outcome of one check, for every command that checks something: `kubetrain doctor` (is this cluster
ready?), submit's preflight (will this job start?), the admission-webhook probe and `kubetrain run`'s local
GPU and CPU checks. One type, one way to show it. Pure: imports nothing of kubetrain."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"
MARKS = {OK: "✓", WARN: "!", FAIL: "✗"}
COLOURS = {OK: "32", WARN: "33", FAIL: "31"}  # ANSI green, yellow, red
TOPIC_WIDTH = 13  # doctor's aligned column of check names


@dataclass(frozen=True)
class Check:
    """What was checked (`name`: fit, gpu, webhooks, ...), ok / warn (could not check, or worth knowing) /
    fail, what was found, and how to fix it."""

    name: str
    status: str
    message: str
    hint: str = ""

    def line(self) -> str:
        """The one-line form: `✗ fit: can never fit ... — lower spec.gpusPerNode`."""
        return check_lines(self)[0]


def failed(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]


def check_lines(check: Check, *, aligned: bool = False, color: bool = False) -> list[str]:
    """How a check is shown. One line `✓ name: message — hint`, or with `aligned` (doctor's report) the name in
    a column and the hint on an indented `→` line below; the mark in bold colour with `color`."""
    mark = MARKS[check.status]
    if color:
        mark = f"\x1b[1;{COLOURS[check.status]}m{mark}\x1b[0m"
    if not aligned:
        hint = f" — {check.hint}" if check.hint else ""
        return [f"{mark} {check.name}: {check.message}{hint}"]
    lines = [f"{mark} {check.name:<{TOPIC_WIDTH}} {check.message}"]
    if check.hint:
        lines.append(f"  {'':<{TOPIC_WIDTH}} → {check.hint}")
    return lines
