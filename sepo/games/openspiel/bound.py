"""A lower bound on the adversarial gap of an OpenSpiel game of more than two players.

The gap (spec §4): the most the other players together can lead the agent by, max over their
strategies σ of E[Σ_{k≠a} u_k − u_a] per play, the agent in seat a as the episode's plays rotate
it (play k: seat k mod n, so each seat weighted by its share of the `rounds` plays). Exact would
mean solving a team game of imperfect information (the others do not see one another's
information); sepo does not. Instead, for each seat of the agent, a coordinate ascent of exact
best responses: every other seat starts at the agent's own policy (other starts: the uniform
policy, and `PURE_STARTS` seeded random pure profiles), then each in turn plays its exact best
response (a tree walk, `Tree.respond`) for the team's lead, the agent and the other seats held
fixed, until a sweep over the seats gains nothing; the best of the starts is kept. Every step plays a real
profile of policies, so the value found is at most the gap: a lower bound, labelled as one, the search named.
Its first step alone is what a single seat can gain by deviating; the later ones only add.

The profile found is `CoalitionResponse`, the rigorous exploiter pool's `BestResponse` for these
games: it plays every other seat, reading the agent's seat from its decision (the agent is player
0, as in `sepo eval`).
"""
from __future__ import annotations

import numpy as np

from sepo.games.base import Decision
from sepo.metrics.exact import Audit, ExactResult, no_action_probabilities
from sepo.policies.base import Policy

MAX_SWEEPS = 50
"""Sweeps of the coordinate ascent at most (each plays every other seat's best response once)."""
PURE_STARTS = 8
"""Random pure profiles the ascent also starts from (seeded): from mixed play alone it can stall
where no single seat gains by deviating but the seats together do (three-player matching pennies
against a uniform agent: every one-seat deviation gains 0, the team's best pure profile 1)."""
SEED = 0
WHAT = "the lower-bound search (exact best responses of the other seats by tree walk)"


def seat_weights(players: int, rounds: int) -> np.ndarray:
    """`[players]`: the share of an episode's `rounds` plays in which the agent (player 0) holds each seat."""
    return np.bincount(np.arange(rounds) % players, minlength=players) / rounds


def ascend(tree, agent: np.ndarray, start: np.ndarray, seat: int) -> tuple[float, np.ndarray, int]:
    """(the team's lead, the profile `[R, W]`, sweeps) of the coordinate ascent from `start` (the
    other seats' rows), the agent's table on `seat`'s rows."""
    own = tree.seat == seat
    profile = np.where(own[:, None], agent, start)
    returns = tree.term_returns
    lead = returns.sum(1) - 2 * returns[:, seat]
    others = [s for s in range(tree.players) if s != seat]
    value = float(tree.terminal_probability(tree.realization(profile[None])[0]) @ lead)
    for sweep in range(1, MAX_SWEEPS + 1):
        gained = False
        for other in others:
            found, choice = tree.respond(tree.realization(profile[None])[0], lead, other)
            if found > value + 1e-12 * max(1.0, abs(value)):
                rows = tree.seat == other
                profile[rows] = choice[rows]
                value, gained = found, True
        if not gained:
            return value, profile, sweep
    return value, profile, MAX_SWEEPS


class CoalitionResponse(Policy):
    """The other seats' profile found against the agent in each of its seats (`profiles[a]`, tables
    over the tree's keys): stateless, so every opponent of every episode may share it."""

    classifier = {"stochastic": False}

    def __init__(self, keys, profiles: dict[int, np.ndarray], players: int):
        self.index = {key: row for row, key in enumerate(keys)}
        self.profiles = profiles
        self.players = players
        self.name = "BestResponse"

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        agent_seat = (decision.observation["seat"] - decision.player) % self.players
        row = self.index.get(decision.info_key)
        profile = self.profiles.get(agent_seat)
        if row is None or profile is None:  # a seat the agent's plays never give it: no search was run there
            return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}
        return {a: float(profile[row, c]) for c, a in enumerate(decision.legal_actions)}


def _read(agent: Policy, decisions):
    """The agent's policy at every information state (`policy_estimate`), the reply count checked first."""
    from sepo.policies.text_policy import check_sampled_replies, policy_estimate

    decoding = getattr(agent, "decoding", None)
    if decoding is not None and not decoding.greedy:
        source = getattr(agent, "source", None)
        exact = getattr(source, "reads_without_sampling", None)
        samples = getattr(agent, "samples", 1)
        if not (callable(exact) and exact(list(decisions))):
            check_sampled_replies(len(decisions), samples, getattr(agent, "name", "the agent"))
    try:
        return policy_estimate(agent, decisions)
    except NotImplementedError as error:
        raise no_action_probabilities(agent, error) from None


def lower_bound(game, agent: Policy):
    """The module's lower bound on `agent`'s adversarial gap in `game`, as an `Audit`: the result,
    the profile that attains it, and how the agent's policy was read; `NoExactSolver` in one line,
    saying no bound is computed, when the tree cannot be walked."""
    from sepo import progress
    from sepo.games.openspiel.exact import tree_of
    from sepo.metrics.exact import NoExactSolver

    try:
        tree = tree_of(game.spec, WHAT)
    except NoExactSolver as error:
        raise NoExactSolver(f"{error}; no bound on the adversarial gap is computed") from None
    estimate = _read(agent, list(tree.decisions))
    table = estimate.table()
    players = tree.players
    weights = seat_weights(players, game.rounds)
    uniform = tree.legal / tree.legal.sum(1, keepdims=True)
    rng = np.random.default_rng(SEED)
    pure = [np.eye(tree.width)[np.floor(rng.random(len(tree.keys)) * tree.legal.sum(1)).astype(int)]
            for _ in range(PURE_STARTS)]
    profiles, extra, totals, sweeps = {}, {}, np.zeros(3), 0
    for seat in np.flatnonzero(weights):
        progress.stage(f"lower bound: the other seats' best responses against the agent in seat {seat}")
        found = [ascend(tree, table, start, int(seat)) for start in (table, uniform, *pure)]
        value, profile, used = max(found, key=lambda one: one[0])
        probability = tree.terminal_probability(tree.realization(profile[None])[0])
        agent_payoff = float(probability @ tree.term_returns[:, seat])
        others_payoff = float(probability @ tree.term_returns.sum(1)) - agent_payoff
        totals += weights[seat] * np.array([value, others_payoff, agent_payoff])
        profiles[int(seat)] = profile
        extra[f"lead_in_seat_{seat}"] = value
        sweeps = max(sweeps, used)
    seats = ", ".join(str(s) for s in np.flatnonzero(weights))
    sampled = not estimate.exact
    method = (
        f"lower bound: for each seat of the agent ({seats}, weighted as its {game.rounds} plays rotate it), "
        f"the other {players - 1} seats' exact best responses for their lead (tree walk), each in turn with "
        "the agent and the rest held fixed, from the agent's own policy, from uniform play and from "
        f"{PURE_STARTS} random pure profiles (seed {SEED}), until a sweep gains nothing (at most {sweeps} "
        "sweeps), the best start kept; the others cannot do worse than this profile, so the gap is at least "
        "its lead"
        + (
            "; the agent's policy is estimated from sampled replies, so this is a point estimate of the bound"
            if sampled
            else ""
        )
    )
    result = ExactResult(
        value=float(totals[0]),
        value_name="adversarial_gap",
        br_payoff=float(totals[1]),
        agent_payoff=float(totals[2]),
        method=method,
        exact=False,
        pruning_bound=0.0,
        extra={**extra, "sweeps": float(sweeps), **({"point_estimate": True} if sampled else {})},
    )
    return Audit(result, CoalitionResponse(tree.keys, profiles, players), estimate.record())
