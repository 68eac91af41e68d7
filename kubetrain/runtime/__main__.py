"""`python -m kubetrain.runtime`: run the Trainer API from KUBETRAIN_CONFIG (what rendered manifests start).

Started by torchrun (locally by `kubetrain run`, in a pod by the manifests), it trains on this rank. Started
directly in a pod that has the operator's PET_* variables but no torchrun around it, it re-executes itself
under torchrun (which reads PET_*), so both launch styles behave the same.

Exit codes: 0 done; 2 configuration error (one line on stderr); 65 the loss became NaN or infinite
(spec.divergence; one line on stderr from rank 0, `diverged at step N: loss nan`); 128+signal after a stop checkpoint on
SIGTERM/SIGINT (143/130); 144 when that checkpoint did not finish within sigtermTimeoutSeconds; 1 an error
in the training code (with its traceback).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

USAGE = """usage: python -m kubetrain.runtime

Runs the kubetrain Trainer API on this rank, configured by the KUBETRAIN_CONFIG environment variable
(set by `kubetrain run` and by manifests from `kubetrain render`). Launch it with torchrun:

  torchrun --nproc-per-node 2 -m kubetrain.runtime
"""


def _needs_torchrun(environ: Mapping[str, str]) -> bool:
    """PET_* present (a PyTorchJob or TrainJob pod) but no torchrun agent above this process."""
    launched = "LOCAL_RANK" in environ or "TORCHELASTIC_RUN_ID" in environ
    return not launched and "PET_NPROC_PER_NODE" in environ


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    if _needs_torchrun(os.environ):
        runner = [sys.executable, "-m", "kubetrain.runtime.launch"]  # torchrun with truthful exit codes
        os.execv(sys.executable, [*runner, "-m", "kubetrain.runtime", *argv])
    # torch is imported only now, after the cheap checks above
    from kubetrain.runtime.config import RuntimeConfigError, load_config
    from kubetrain.runtime.divergence import TrainingDiverged
    from kubetrain.runtime.stop import TrainingStopped
    from kubetrain.runtime.trainer import Trainer, describe

    try:
        config = load_config()
        if config.train is None:
            raise RuntimeConfigError("spec.train: not set; the Trainer API (python -m kubetrain.runtime) "
                                     "needs it (or set spec.command to run your own script)")
        result = Trainer(config.train, config.checkpoint, divergence=config.divergence).fit()
    except RuntimeConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except TrainingDiverged as exc:
        if os.environ.get("RANK", "0") == "0":
            print(f"kubetrain.runtime: {exc} (spec.divergence.policy {config.divergence.policy}); exit code "
                  f"{exc.exit_code}", file=sys.stderr)
        return exc.exit_code
    except TrainingStopped as exc:
        print(f"kubetrain.runtime: {exc}; exit code {exc.exit_code}", file=sys.stderr)
        return exc.exit_code
    if os.environ.get("RANK", "0") == "0":
        print(f"kubetrain.runtime: done: {describe(result)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from kubetrain.runtime.distributed import exit_process

    exit_process(main())
