"""Bots of an OpenSpiel game from OpenSpiel's own policies: the uniform policy, and the average
policies of CFR and CFR+ (pyspiel's C++ solvers) after N iterations, computed on first use and
kept for the process (Leduc: about 2 s for 100 iterations on a loaded core). The exact best
response is not a bot here: the rigorous protocol's exploiter pool adds it against each agent."""
from __future__ import annotations

import functools

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.policies.base import Policy

MAX_ITERATIONS = 10_000


class Uniform(Policy):
    """Every legal move with equal probability (OpenSpiel's `UniformRandomPolicy`)."""

    name = "Uniform"
    classifier = {"stochastic": True}

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}


@functools.lru_cache(maxsize=16)
def average_policy(spec: str, solver: str, iterations: int) -> dict:
    """{information state: {action: probability}} of pyspiel's `solver` after `iterations`."""
    import pyspiel

    from sepo.games.openspiel.rules import load
    from sepo.games.openspiel.tree import check_walkable

    game = load(spec)
    if game.num_players() != 2:
        raise SepoError(f"openspiel:{spec}: CFR bots are for two-player games")
    check_walkable(game, f"openspiel:{spec}", f"pyspiel's {solver}")
    run = {"CFR": pyspiel.CFRSolver, "CFRPlus": pyspiel.CFRPlusSolver}[solver](game)
    for _ in range(iterations):
        run.evaluate_and_update_policy()
    return {key: dict(pairs) for key, pairs in run.tabular_average_policy().policy_table().items()}


class AveragePolicy(Policy):
    """The average policy of CFR or CFR+ after `iterations` (a deterministic function of them)."""

    classifier = {"stochastic": True}

    def __init__(self, spec: str, solver: str, iterations: int = 100):
        if isinstance(iterations, float) and iterations.is_integer():  # pool specs read numbers as floats
            iterations = int(iterations)
        if (
            isinstance(iterations, bool)
            or not isinstance(iterations, int)
            or not 1 <= iterations <= MAX_ITERATIONS
        ):
            raise SepoError(
                f"{solver}: iterations must be an integer in 1..{MAX_ITERATIONS:,}, got {iterations!r}"
            )
        self.table = average_policy(spec, solver, iterations)
        self.name = f"{solver}(iterations={iterations})"

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        probs = self.table.get(decision.info_key)
        if probs is None:
            return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}
        total = sum(probs.get(a, 0.0) for a in decision.legal_actions)
        if total <= 0:
            return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}
        return {a: probs.get(a, 0.0) / total for a in decision.legal_actions}


def bot_table(spec: str) -> dict:
    return {"Uniform": Uniform,
            "CFR": lambda iterations=100: AveragePolicy(spec, "CFR", iterations),
            "CFRPlus": lambda iterations=100: AveragePolicy(spec, "CFRPlus", iterations)}
