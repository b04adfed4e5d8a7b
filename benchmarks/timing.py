"""What the benchmarks here share: best-of-n wall-clock timing, the machine line, and the
OpenSpiel reference for two-player repeated games.

Benchmarks run as scripts (`python benchmarks/bench_x.py`), so this module is imported from the
script's own folder (`from timing import best_of`)."""
from __future__ import annotations

import platform
import time

import numpy as np


def best_of(repeats: int, fn):
    """(the smallest wall-clock seconds of `repeats` calls of `fn`, the last call's value)."""
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def machine_line() -> str:
    return f"python {platform.python_version()} on {platform.machine()}, numpy {np.__version__}"


def openspiel_br_value(solver, table) -> float:
    """Reference: OpenSpiel's Python `BestResponsePolicy` value per round against the tabular agent
    `table` (rows in `solver`'s order) on `pyspiel.create_repeated_game` of the solver's stage game
    with full recall (the repeated-game solvers of IPD and split bargaining)."""
    import pyspiel
    from open_spiel.python import policy as os_policy
    from open_spiel.python.algorithms import best_response

    stage, rounds = solver.stage, solver.game.rounds
    names = [str(a) for a in range(stage.agent.shape[0])]  # labels only
    matrix = pyspiel.create_matrix_game(
        "stage", "stage", names, names, stage.agent.tolist(), stage.opponent.tolist()
    )
    game = pyspiel.convert_to_turn_based(
        pyspiel.create_repeated_game(matrix, {"num_repetitions": rounds, "recall": rounds})
    )

    class Agent(os_policy.Policy):
        def __init__(self):
            super().__init__(game, [0, 1])

        def action_probabilities(self, state, player_id=None):
            actions = state.history()
            history = tuple((actions[i], actions[i + 1]) for i in range(0, len(actions) - 1, 2))
            row = solver._rows([(len(history), history)])[0]
            return dict(enumerate(table[row].tolist()))

    return best_response.BestResponsePolicy(game, 1, Agent()).value(game.new_initial_state()) / rounds
