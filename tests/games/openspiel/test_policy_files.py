"""Policy files of large OpenSpiel games: compact and exact (a trained tic-tac-toe table was
29.6 MB when every row was written densely, one number a line)."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from sepo.games import get_domain  # noqa: E402
from sepo.metrics.exact import keys_of, solver_for, uniform_table  # noqa: E402
from sepo.policies.tabular import TabularPolicy  # noqa: E402
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer, load_run_policy  # noqa: E402


def test_trained_leduc_policy_file_is_compact_and_exact(tmp_path):
    config = TabularSEPOConfig(game="openspiel:leduc_poker", steps=2, groups=8, seed=0)
    trainer = TabularSEPOTrainer(config, tmp_path / "run")
    trainer.train()
    path = tmp_path / "run" / "policy.json"
    loaded = load_run_policy(tmp_path / "run", "openspiel:leduc_poker")
    assert loaded.keys == tuple(trainer.env.keys)
    assert np.array_equal(loaded.table, trainer.policy())
    assert path.stat().st_size < 120_000  # 143,348 bytes before (936 states, 3 actions, dense)
    assert len(json.dumps(TabularPolicy(trainer.policy(), trainer.env.keys).to_json(), indent=1)) > 140_000


@pytest.mark.slow
def test_tic_tac_toe_uniform_policy_file_shrinks(tmp_path):
    """294,778 information states: 29.6 MB dense (the old `save`), under 8 MB compact."""
    decisions = solver_for(get_domain("openspiel:tic_tac_toe").game()).decisions()
    policy = TabularPolicy(uniform_table(decisions), keys_of(decisions))
    path = tmp_path / "policy.json"
    policy.save(path)
    assert path.stat().st_size < 8_000_000
    assert len(json.dumps(policy.to_json(), indent=1)) > 29_000_000
    loaded = TabularPolicy.load(path)
    assert loaded.keys == policy.keys and np.array_equal(loaded.table, policy.table)
