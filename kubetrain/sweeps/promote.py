"""The best trial of a sweep (local or in the cluster), and that trial written as a plain kubetrain.yaml: the
sweep's job with the trial's values in place, the job's own name and checkpoint directory, no `sweep` section."""

from __future__ import annotations

from pathlib import Path

import yaml

from kubetrain.errors import UsageError
from kubetrain.files import write_atomically
from kubetrain.jobspec.model import TrainingJob
from kubetrain.sweeps.engine import Engine
from kubetrain.sweeps.state import SweepState, Trial
from kubetrain.sweeps.trial import trial_document, trial_job


class NoTrialComplete(UsageError):
    """A sweep has no complete trial (yet) to name best or promote."""

    exit_code = 1


def best_trial(job: TrainingJob, state: SweepState, origin: str) -> Trial:
    """The sweep's best complete trial; NoTrialComplete (one line: how many ran and ended) when none is."""
    assert job.sweep is not None
    winner = Engine(job.sweep).best(state)
    if winner is None:
        running = state.count("running")
        raise NoTrialComplete(f"{origin}: no trial has completed yet ({running} running, "
                              f"{len(state.trials) - running} of {job.sweep.trial_count} ended)")
    return winner


def promoted_yaml(job: TrainingJob, origin: str, winner: Trial) -> str:
    """The promoted spec's text; `origin` says where the sweep came from (a file, `Sweep NS/NAME`)."""
    trial_job(job, winner.params, None, origin)  # a promoted spec is a valid spec
    metric = job.sweep.objective.metric if job.sweep else "objective"
    header = (f"# The best trial ({winner.number}) of the sweep in {origin}: {metric} {winner.value}\n"
              f"# parameters: {winner.params}\n")
    return header + yaml.safe_dump(trial_document(job, winner.params, None), sort_keys=False)


def write_promoted(path: Path, text: str, force: bool = False) -> None:
    """Write the promoted spec; an existing file is kept unless `force`."""
    if path.exists() and not force:
        raise UsageError(f"{path} already exists (use --force to overwrite)")
    write_atomically(path, text)
