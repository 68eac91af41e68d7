"""Run `kubetrain ARGV` in a fresh interpreter and report which heavy packages (or dotted modules) it loaded
(start-up budgets: docs/performance.md). The report goes to stderr after the command's own output."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CODE = """import sys
from kubetrain.cli.main import main
code = 0
try:
    main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code or 0
roots = set(sys.argv[1].split(','))
print(f'EXIT={code}', file=sys.stderr)
print('LOADED=' + ','.join(sorted(({m.split('.')[0] for m in sys.modules} | set(sys.modules)) & roots)),
      file=sys.stderr)
"""


@dataclass(frozen=True)
class Run:
    exit_code: int | None
    loaded: list[str]  # which of the asked-about packages or modules were imported
    stdout: str
    stderr: str


def run_fresh(argv: list[str], packages: set[str]) -> Run:
    result = subprocess.run([sys.executable, "-c", _CODE, ",".join(sorted(packages)), *argv], capture_output=True,
                            text=True, timeout=120, cwd=REPO, check=False)
    tail = result.stderr.rstrip("\n").rsplit("\n", 2)[-2:]
    if len(tail) != 2 or not tail[0].startswith("EXIT=") or not tail[1].startswith("LOADED="):
        raise AssertionError(f"kubetrain {' '.join(argv)} did not finish: {result.stderr[-2000:]}")
    code = tail[0].removeprefix("EXIT=")
    loaded = [name for name in tail[1].removeprefix("LOADED=").split(",") if name]
    return Run(int(code) if code.lstrip("-").isdigit() else None, loaded, result.stdout, result.stderr)
