"""The language-model trainer's logged gap says what it is: a model reads the whole history it is
shown, so a gap on memory-m states is its projection's."""
from types import SimpleNamespace

import numpy as np

from sepo.games import load_game
from sepo.games.ipd.exact import IPDSolver
from sepo.training.grpo import SEPOEnvironment


def _metrics(game):
    solver = IPDSolver(game)
    environment = SimpleNamespace(solver=solver, domain_env=SimpleNamespace(exact_metrics=lambda table: {}))
    table = np.full((len(solver.keys), 2), 0.5)
    return SEPOEnvironment.table_metrics(environment, table)


def test_a_models_gap_on_memory_states_is_labelled_a_projection():
    projected = _metrics(load_game("ipd", rounds=4, memory=1))
    assert projected["projection_memory"] == 1
    whole = _metrics(load_game("ipd", rounds=4))
    assert "projection_memory" not in whole
