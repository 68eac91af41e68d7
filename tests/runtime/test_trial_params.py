"""`kubetrain.runtime.trial_params()`: a sweep trial's parameters inside the training code (KUBETRAIN_PARAMS)."""

from __future__ import annotations

import pytest

from tests.runtime.torchmod import require_torch

require_torch()
pytestmark = pytest.mark.torch


def test_trial_params_reads_the_trials_values_and_is_empty_outside_a_sweep() -> None:
    from kubetrain.runtime import RuntimeConfigError, trial_params

    assert trial_params({"KUBETRAIN_PARAMS": '{"train.lr":0.01,"width":32}'}) == {"train.lr": 0.01, "width": 32}
    assert trial_params({}) == {}
    with pytest.raises(RuntimeConfigError, match=r"^KUBETRAIN_PARAMS: invalid JSON"):
        trial_params({"KUBETRAIN_PARAMS": "{"})
