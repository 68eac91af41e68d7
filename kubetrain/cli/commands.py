"""The command table and top-level help, free of imports so `kubetrain --help` can skip loading click.

`fast_help()` must stay byte-identical to what click prints for `kubetrain --help`; a test checks it at
several terminal widths.
"""

from __future__ import annotations

# verb -> (module:function, one-line help). Listing help here keeps `kubetrain --help` from importing verbs.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("kubetrain.cli.init_cmd:init", "Write a commented starter kubetrain.yaml."),
    "render": ("kubetrain.cli.render_cmd:render", "Render the job spec into Kubernetes manifests."),
    "validate": ("kubetrain.cli.validate_cmd:validate", "Check manifests offline against the CRD and core schemas."),
    "schemas": ("kubetrain.cli.schemas_cmd:schemas", "Fetch and list the CRD schemas used by validate."),
    "run": ("kubetrain.cli.run_cmd:run", "Run the job on this machine with torchrun (no cluster)."),
    "sweep": ("kubetrain.cli.sweep_cmd:sweep", "Run a hyperparameter sweep's trials; show and promote the best."),
    "build": ("kubetrain.cli.build_cmd:build", "Build (and push or kind-load) the training image."),
    "cluster": ("kubetrain.cli.kind_cmd:cluster", "Create or delete a local kind cluster with NVIDIA GPUs."),
    "submit": ("kubetrain.cli.submit_cmd:submit", "Render, validate, preflight and apply the job to a cluster."),
    "status": ("kubetrain.cli.status_cmd:status", "Show a job's conditions, pods, recent Events and hints."),
    "list": ("kubetrain.cli.status_cmd:list_", "List PyTorchJobs and TrainJobs with state, size and age."),
    "events": ("kubetrain.cli.status_cmd:events", "Show a job's Events, each with a one-line hint."),
    "delete": ("kubetrain.cli.delete_cmd:delete", "Delete a job and its code ConfigMap (--wait for its pods)."),
    "logs": ("kubetrain.cli.logs_cmd:logs", "Merged logs of every replica of a job."),
    "metrics": ("kubetrain.cli.metrics_cmd:metrics", "Metrics history of a job: table, plots, CSV/JSON, HTML report."),
    "tensorboard": ("kubetrain.cli.tensorboard_cmd:tensorboard", "Serve a job's TensorBoard event files."),
    "gpu": ("kubetrain.cli.gpu_cmd:gpu", "nvidia-smi from every pod of a job."),
    "stacks": ("kubetrain.cli.stacks_cmd:stacks", "Every rank's Python stack from a running job, grouped."),
    "doctor": ("kubetrain.cli.doctor_cmd:doctor", "Check a cluster's readiness for GPU training."),
    "controller": ("kubetrain.cli.controller_cmd:controller", "Run or install the TrainingJob operator."),
}

# Every block is marked \b (no rewrapping) and kept under 78 columns, so the text does not depend on the
# terminal's width as long as it is at least FAST_HELP_MIN_WIDTH.
GROUP_HELP = """\b
Take a distributed PyTorch training job from a laptop to a GPU cluster.

\b
One typed job file (kubetrain.yaml) renders into a Kubeflow PyTorchJob or
TrainJob, validates offline, runs locally with torchrun, and submits to any
cluster.

\b
Example:
  kubetrain init && kubetrain render | kubectl apply -f -
"""
HELP_OPTIONS = ("-h", "--help")
FAST_HELP_MIN_WIDTH = 80


def fast_help() -> str:
    """`kubetrain --help` as click formats it, without importing click."""
    paragraphs = [block.removeprefix("\b\n") for block in GROUP_HELP.strip().split("\n\n")]
    body = "\n\n".join("\n".join(f"  {line}" if line else "" for line in block.splitlines()) for block in paragraphs)
    width = max(len(name) for name in COMMANDS)
    commands = "\n".join(f"  {name.ljust(width)}  {text}" for name, (_, text) in COMMANDS.items())
    options = "  --version   Show the version and exit.\n  -h, --help  Show this message and exit."
    return (f"Usage: kubetrain [OPTIONS] COMMAND [ARGS]...\n\n{body}\n\nOptions:\n{options}\n\n"
            f"Commands:\n{commands}\n")
