"""The training runtimes the pinned Kubeflow Trainer v2.3.0 ships (manifests/base/runtimes/*.yaml upstream,
data-cache and torchtune included): their replicated jobs and containers, the `trainer.env` names their ML
policy plugin refuses (pkg/constants: TorchRunReservedEnvNames, MPIReservedEnvNames, XGBoostReservedEnvNames;
the JAX plugin refuses none), and the volumes their pods have, where nothing adds more. A TrainJob's
runtimePatches are checked against this offline; the test control plane installs torch-distributed, whose
entry the oracle (tests/validate/oracle.py: trainer_errors) checks against the real Trainer."""

from __future__ import annotations

from dataclasses import dataclass

from kubetrain.rules.names import TORCHRUN_RESERVED_ENV

MPI_RESERVED_ENV = ("OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_keep_fqdn_hostnames",
                    "OMPI_MCA_orte_set_default_slots")
XGBOOST_RESERVED_ENV = ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER")


@dataclass(frozen=True)
class Runtime:
    policy: str  # the mlPolicy plugin: torch, mpi, jax, xgboost
    jobs: dict[str, frozenset[str]]  # replicated job -> its containers
    reserved_env: tuple[str, ...]
    # the pods' volumes, when the runtime's template is all there is; None where a plugin adds volumes (MPI's
    # hostfile and ssh keys) or the template mounts volumes it does not define (torchtune's `initializer`)
    volumes: frozenset[str] | None = None


def _jobs(*names: str, launcher: bool = False) -> dict[str, frozenset[str]]:
    jobs = {name: frozenset({name}) for name in names}
    jobs["node"] = frozenset({"node"})
    if launcher:
        jobs["launcher"] = frozenset({"node"})  # the MPI runtimes' launcher job runs a container named node
    return jobs


_TORCHTUNE = Runtime("torch", _jobs("dataset-initializer", "model-initializer"), TORCHRUN_RESERVED_ENV)
RUNTIMES: dict[str, Runtime] = {
    "torch-distributed": Runtime("torch", _jobs(), TORCHRUN_RESERVED_ENV, frozenset()),
    "torch-distributed-with-cache": Runtime("torch", _jobs("dataset-initializer"), TORCHRUN_RESERVED_ENV),
    "deepspeed-distributed": Runtime("mpi", _jobs(launcher=True), MPI_RESERVED_ENV),
    "mlx-distributed": Runtime("mpi", _jobs(launcher=True), MPI_RESERVED_ENV),
    "jax-distributed": Runtime("jax", _jobs(), ()),
    "xgboost-distributed": Runtime("xgboost", _jobs(), XGBOOST_RESERVED_ENV),
    "torchtune-llama3.2-1b": _TORCHTUNE,
    "torchtune-llama3.2-3b": _TORCHTUNE,
    "torchtune-qwen2.5-1.5b": _TORCHTUNE,
}
# A runtime of the user's own: kubetrain renders for the torch runtimes, so their reserved names apply.
UNKNOWN = Runtime("torch", {}, TORCHRUN_RESERVED_ENV)


def runtime_of(ref: object) -> Runtime | None:
    """The shipped runtime a TrainJob's runtimeRef names (a ClusterTrainingRuntime), else None."""
    if not isinstance(ref, dict) or ref.get("kind", "ClusterTrainingRuntime") != "ClusterTrainingRuntime":
        return None
    return RUNTIMES.get(str(ref.get("name")))
