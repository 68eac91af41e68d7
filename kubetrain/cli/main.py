"""The `kubetrain` command: a click group whose verbs are imported only when run (fast --help, no torch)."""

from __future__ import annotations

import importlib
from typing import Any

import click

from kubetrain import __version__
from kubetrain.cli.output import fail

# verb -> (module:function, one-line help). Listing help here keeps `kubetrain --help` from importing verbs.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("kubetrain.cli.init_cmd:init", "Write a commented starter kubetrain.yaml."),
    "render": ("kubetrain.cli.render_cmd:render", "Render the job spec into Kubernetes manifests."),
    "validate": ("kubetrain.cli.validate_cmd:validate", "Check manifests offline against the CRD and core schemas."),
    "schemas": ("kubetrain.cli.schemas_cmd:schemas", "Fetch and list the CRD schemas used by validate."),
    "run": ("kubetrain.cli.run_cmd:run", "Run the job on this machine with torchrun (no cluster)."),
    "build": ("kubetrain.cli.build_cmd:build", "Build (and push or kind-load) the training image."),
    "cluster": ("kubetrain.cli.kind_cmd:cluster", "Create or delete a local kind cluster with NVIDIA GPUs."),
    "submit": ("kubetrain.cli.submit_cmd:submit", "Render, validate, preflight and apply the job to a cluster."),
    "status": ("kubetrain.cli.status_cmd:status", "Show a job's conditions, pods, recent Events and hints."),
    "list": ("kubetrain.cli.status_cmd:list_", "List PyTorchJobs and TrainJobs with state, size and age."),
    "events": ("kubetrain.cli.status_cmd:events", "Show a job's Events, each with a one-line hint."),
    "delete": ("kubetrain.cli.delete_cmd:delete", "Delete a job and its code ConfigMap (--wait for its pods)."),
    "logs": ("kubetrain.cli.logs_cmd:logs", "Merged logs of every replica of a job."),
    "gpu": ("kubetrain.cli.gpu_cmd:gpu", "nvidia-smi from every pod of a job."),
    "doctor": ("kubetrain.cli.doctor_cmd:doctor", "Check a cluster's readiness for GPU training."),
}


class LazyGroup(click.Group):
    """Imports a verb's module only when that verb runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attr = COMMANDS[cmd_name][0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kubetrain")
def cli() -> None:
    """Take a distributed PyTorch training job from a laptop to a GPU cluster.

    One typed job file (kubetrain.yaml) renders into a Kubeflow PyTorchJob or TrainJob,
    validates offline, runs locally with torchrun, and submits to any cluster.

    \b
    Example:
      kubetrain init && kubetrain render | kubectl apply -f -
    """


def main(argv: list[str] | None = None) -> Any:
    """Console entry point: every KubetrainError becomes a one-line message and its exit code."""
    try:
        return cli.main(args=argv, prog_name="kubetrain", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        fail(["interrupted"], 130)
