"""The pod's launcher (`python -m kubetrain.runtime.launch`, torchrun with truthful exit codes) loads only
what a pod needs: the runtime package's face, the launcher and kubetrain.podenv; never the spec's pydantic
models, jinja2, YAML, render or the Kubernetes client (docs/architecture.md has the measured cost)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.cli.imports import REPO

BUDGET = {"kubetrain", "kubetrain.podenv", "kubetrain.runtime", "kubetrain.runtime.launch"}
FORBIDDEN = ("jinja2", "pydantic", "yaml", "kubetrain.jobspec", "kubetrain.render", "kubetrain.kube",
             "kubetrain.local")
_PROBE = ("import json, sys, kubetrain.runtime.launch; "
          "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('kubetrain', 'jinja2', "
          "'pydantic', 'yaml'))))")


def test_the_launcher_loads_only_what_a_pod_needs() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300, cwd=REPO,
                          check=True)
    loaded = json.loads(done.stdout)
    assert [name for name in loaded if name.startswith(FORBIDDEN)] == []
    assert {name for name in loaded if name.startswith("kubetrain")} <= BUDGET


_CONFIG_PROBE = ("import json, os, sys; from kubetrain.runtime.config import load_config; "
                 "os.environ['KUBETRAIN_CONFIG'] = json.dumps({'train': {'model': 'm:a', 'dataset': 'm:b'}, "
                 "'checkpoint': {'dir': '/ckpt'}}); assert load_config().train.batchSize == 32; "
                 "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('kubetrain', 'jinja2', "
                 "'pydantic', 'yaml'))))")


def test_the_trainer_api_reads_its_config_without_the_spec_models() -> None:
    """`python -m kubetrain.runtime` reads KUBETRAIN_CONFIG with kubetrain.runtime.settings: no pydantic (about
    170 ms of CPU in every pod before torch), no job spec."""
    done = subprocess.run([sys.executable, "-c", _CONFIG_PROBE], capture_output=True, text=True, timeout=300,
                          cwd=REPO, check=True)
    assert [name for name in json.loads(done.stdout) if name.startswith(FORBIDDEN)] == []
