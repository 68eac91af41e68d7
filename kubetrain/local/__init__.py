"""The local backend of `kubetrain run`: torchrun agents on this machine (no torch import here)."""

from kubetrain.local.envfile import parse_env_file
from kubetrain.local.plan import NodeCommand, RunOptions, RunPlan, build_plan
from kubetrain.local.supervisor import Supervisor

__all__ = ["NodeCommand", "RunOptions", "RunPlan", "Supervisor", "build_plan", "parse_env_file"]
