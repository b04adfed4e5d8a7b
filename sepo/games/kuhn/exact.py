"""Exact game theory of one hand of Kuhn poker, batched over many policies at once.

A policy is an array `[..., 12, 2]` of action probabilities (pass/fold, bet/call) per
information state, rows in `sepo.games.kuhn.rules.INFO_STATES` order; a policy plays both seats.
Everything is closed-form over the six deals and five terminal histories, vectorised with
numpy, so thousands of policies are evaluated in one call (OpenSpiel walks the tree in Python,
one policy at a time; `benchmarks/bench_kuhn_exploitability.py` measures the difference).

Conventions follow OpenSpiel: `nash_conv` = sum over seats of the best-response gain,
`exploitability` = nash_conv / 2. The game value for seat 0 is -1/18.
"""
from __future__ import annotations

import numpy as np

from sepo.games.base import Decision
from sepo.games.kuhn.rules import DEALS, INFO_STATES, KuhnPoker
from sepo.metrics.exact import ExactResult
from sepo.policies.tabular import TabularPolicy

GAME_VALUE = -1.0 / 18.0
ROOT = np.array([INFO_STATES.index(f"{c}") for c in range(3)])
AFTER_PASS = np.array([INFO_STATES.index(f"{c}p") for c in range(3)])
FACING_BET = np.array([INFO_STATES.index(f"{c}b") for c in range(3)])
PASS_BET = np.array([INFO_STATES.index(f"{c}pb") for c in range(3)])
SEAT0_ROWS = np.concatenate([ROOT, PASS_BET])
SEAT1_ROWS = np.concatenate([AFTER_PASS, FACING_BET])

_C0 = np.array([d[0] for d in DEALS])
_C1 = np.array([d[1] for d in DEALS])
_P_DEAL = 1.0 / len(DEALS)
_WIN = np.where(_C0 > _C1, 1.0, -1.0)  # showdown sign for seat 0, per deal
# one-hot [6 deals, 3 cards]: which deals give seat 0 (or seat 1) a card; used to sum deals by card
_BY_C0 = np.eye(3)[_C0]
_BY_C1 = np.eye(3)[_C1]


BLOCK = 2048
"""Policies per block in batched calls. The closed forms make a few dozen temporaries the size of
the batch; in blocks of about two thousand policies they stay in cache, so throughput does not fall
as the batch grows (benchmarks/bench_kuhn_exploitability.py measures it)."""


def _blockwise(function, array) -> np.ndarray:
    """`function(as_policy(block))` over blocks of at most BLOCK policies, reassembled."""
    policy = np.asarray(array, dtype=float)
    if policy.ndim < 3 or policy[..., 0, 0].size <= BLOCK:
        return function(as_policy(policy))
    flat = policy.reshape((-1,) + policy.shape[-2:])
    out = np.concatenate([function(as_policy(flat[i:i + BLOCK])) for i in range(0, len(flat), BLOCK)])
    return out.reshape(policy.shape[:-2] + out.shape[1:])


def as_policy(array) -> np.ndarray:
    """Validate a policy array `[..., 12, 2]` of probabilities summing to one per row."""
    policy = np.asarray(array, dtype=float)
    if policy.shape[-2:] != (12, 2):
        raise ValueError(f"a Kuhn policy has shape [..., 12, 2]; got {policy.shape}")
    if np.any(policy < -1e-12) or not np.allclose(policy.sum(-1), 1.0, atol=1e-9):
        raise ValueError("a Kuhn policy must hold probabilities that sum to 1 in every information state")
    return policy


def expected_value(seat0: np.ndarray, seat1: np.ndarray) -> np.ndarray:
    """Expected chips won by seat 0 when `seat0` plays seat 0 and `seat1` plays seat 1."""
    open_pass, open_bet = seat0[..., ROOT[_C0], 0], seat0[..., ROOT[_C0], 1]
    fold_late, call_late = seat0[..., PASS_BET[_C0], 0], seat0[..., PASS_BET[_C0], 1]
    check_back, bet_late = seat1[..., AFTER_PASS[_C1], 0], seat1[..., AFTER_PASS[_C1], 1]
    fold, call = seat1[..., FACING_BET[_C1], 0], seat1[..., FACING_BET[_C1], 1]
    after_pass = check_back * _WIN + bet_late * (call_late * 2 * _WIN - fold_late)
    after_bet = fold + call * 2 * _WIN
    return _P_DEAL * (open_pass * after_pass + open_bet * after_bet).sum(-1)


def head_to_head(agent: np.ndarray, opponent: np.ndarray) -> np.ndarray:
    """Agent's expected chips per hand against `opponent`, seats equally likely."""
    return 0.5 * (expected_value(agent, opponent) - expected_value(opponent, agent))


def seat1_action_values(seat0: np.ndarray) -> np.ndarray:
    """Counterfactual values `[..., 12, 2]` of seat 1's actions against `seat0` (seat-1 rows only;
    seat-0 rows are zero). Weighted by chance and seat 0's reach, as OpenSpiel's best response."""
    open_pass, open_bet = seat0[..., ROOT[_C0], 0], seat0[..., ROOT[_C0], 1]
    fold_late, call_late = seat0[..., PASS_BET[_C0], 0], seat0[..., PASS_BET[_C0], 1]
    values = np.zeros(seat0.shape[:-2] + (12, 2))
    check = _P_DEAL * open_pass * -_WIN
    bet = _P_DEAL * open_pass * (fold_late - call_late * 2 * _WIN)
    fold = _P_DEAL * open_bet * -1.0
    call = _P_DEAL * open_bet * -2 * _WIN
    values[..., AFTER_PASS, 0] = check @ _BY_C1
    values[..., AFTER_PASS, 1] = bet @ _BY_C1
    values[..., FACING_BET, 0] = fold @ _BY_C1
    values[..., FACING_BET, 1] = call @ _BY_C1
    return values


def seat0_action_values(seat1: np.ndarray, seat0_continuation: np.ndarray | None = None) -> np.ndarray:
    """Counterfactual values `[..., 12, 2]` of seat 0's actions against `seat1` (seat-0 rows only).

    The value of PASS at an opening depends on seat 0's own later choice facing a bet: it uses
    `seat0_continuation` if given (the policy's own play), else the best choice (best response).
    """
    check_back, bet_late = seat1[..., AFTER_PASS[_C1], 0], seat1[..., AFTER_PASS[_C1], 1]
    fold, call = seat1[..., FACING_BET[_C1], 0], seat1[..., FACING_BET[_C1], 1]
    values = np.zeros(seat1.shape[:-2] + (12, 2))
    late_fold = (_P_DEAL * bet_late * -1.0) @ _BY_C0
    late_call = (_P_DEAL * bet_late * 2 * _WIN) @ _BY_C0
    values[..., PASS_BET, 0] = late_fold
    values[..., PASS_BET, 1] = late_call
    if seat0_continuation is None:
        late = np.maximum(late_fold, late_call)
    else:
        late = (
            seat0_continuation[..., PASS_BET, 0] * late_fold
            + seat0_continuation[..., PASS_BET, 1] * late_call
        )
    values[..., ROOT, 0] = (_P_DEAL * check_back * _WIN) @ _BY_C0 + late
    values[..., ROOT, 1] = (_P_DEAL * (fold + call * 2 * _WIN)) @ _BY_C0
    return values


def best_response_values(policy: np.ndarray) -> np.ndarray:
    """`[..., 2]`: the best-response value of a responder in seat 0 (against the policy's seat-1
    part) and in seat 1 (against its seat-0 part)."""
    seat0_gain = seat0_action_values(policy)[..., ROOT, :].max(-1).sum(-1)
    seat1_q = seat1_action_values(policy)
    seat1_gain = seat1_q[..., SEAT1_ROWS, :].max(-1).sum(-1)
    return np.stack([seat0_gain, seat1_gain], axis=-1)


def best_response(policy: np.ndarray) -> np.ndarray:
    """A deterministic best response `[..., 12, 2]` to `policy` (both seats); ties go to pass."""
    q = seat0_action_values(policy) + seat1_action_values(policy)
    choice = (q[..., 1] > q[..., 0] + 1e-15).astype(int)
    return np.eye(2)[choice]


def nash_conv(policy) -> np.ndarray:
    return _blockwise(lambda block: best_response_values(block).sum(-1), policy)


def exploitability(policy) -> np.ndarray:
    """NashConv / 2: how much a best responder wins per hand on average over the two seats."""
    return nash_conv(policy) / 2.0


def own_reach(policy: np.ndarray) -> np.ndarray:
    """`[..., 12]`: the policy's own probability of the moves leading to each information state."""
    reach = np.ones(policy.shape[:-1])
    reach[..., PASS_BET] = policy[..., ROOT, 0]
    return reach


def exploitability_gradient(policy) -> np.ndarray:
    """d exploitability / d policy[I, a] at `policy` (Danskin: the best response held fixed),
    i.e. minus half the policy's own reach to I times the counterfactual value of a against the
    best response."""
    policy = as_policy(policy)
    return -0.5 * own_reach(policy)[..., None] * counterfactual_values_vs_best_response(policy)


def counterfactual_values_vs_best_response(policy: np.ndarray) -> np.ndarray:
    """`[..., 12, 2]`: value to the policy of each action at each of its information states when
    the other seat plays a best response to it, weighted by chance and the responder's reach."""
    responder = best_response(policy)
    as_seat0 = seat0_action_values(responder, seat0_continuation=policy)
    as_seat1 = seat1_action_values(responder)
    q = np.zeros_like(as_seat0)
    q[..., SEAT0_ROWS, :] = as_seat0[..., SEAT0_ROWS, :]
    q[..., SEAT1_ROWS, :] = as_seat1[..., SEAT1_ROWS, :]
    return q


def external_reach(opponents: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """`[12]`: probability that a training hand reaches each information state of the agent, over
    chance, a uniformly drawn seat and the opponent drawn from `opponents` `[K, 12, 2]` with
    `weights` (the agent's own moves excluded)."""
    opponents = np.asarray(opponents, dtype=float)
    weights = np.full(len(opponents), 1.0 / len(opponents)) if weights is None else np.asarray(weights, float)
    reach = np.zeros(12)
    reach[ROOT] = 0.5 * _P_DEAL * _BY_C0.sum(0)
    for opponent, weight in zip(opponents, weights):
        bet_after_pass = opponent[AFTER_PASS[_C1], 1]
        reach[PASS_BET] += weight * 0.5 * (_P_DEAL * bet_after_pass) @ _BY_C0
        reach[AFTER_PASS] += weight * 0.5 * (_P_DEAL * opponent[ROOT[_C0], 0]) @ _BY_C1
        reach[FACING_BET] += weight * 0.5 * (_P_DEAL * opponent[ROOT[_C0], 1]) @ _BY_C1
    return reach


def nash_policy(alpha: float = 1.0 / 3.0) -> np.ndarray:
    """A Nash equilibrium from the one-parameter family: seat 0 bluffs J with probability alpha,
    value-bets K with 3*alpha and calls with Q at alpha + 1/3; seat 1 is the unique equilibrium
    response (bluff J after a pass 1/3, call with Q 1/3)."""
    if not 0.0 <= alpha <= 1.0 / 3.0:
        raise ValueError(f"the Kuhn Nash family has alpha in [0, 1/3]; got {alpha}")
    bet = {"0": alpha, "1": 0.0, "2": 3 * alpha, "0pb": 0.0, "1pb": alpha + 1 / 3, "2pb": 1.0,
           "0p": 1 / 3, "1p": 0.0, "2p": 1.0, "0b": 0.0, "1b": 1 / 3, "2b": 1.0}
    return np.array([[1.0 - bet[key], bet[key]] for key in INFO_STATES])


def uniform_policy() -> np.ndarray:
    return np.full((12, 2), 0.5)


def canonical_decisions(hands: int = 6) -> dict[str, Decision]:
    """One `Decision` per information state, from hand 1 of a `hands`-hand episode (no prior
    score in the prompt)."""
    game = KuhnPoker(hands=hands)
    found: dict[str, Decision] = {}
    for deal in range(len(DEALS)):
        for history in ("", "p", "b", "pb"):
            state = game.new_initial_state()
            state.apply_action(deal)
            for move in history:
                state.apply_action("pb".index(move))
            decision = state.decision(state.current_player())
            found.setdefault(decision.info_key, decision)
    return found


class KuhnSolver:
    """The exact-solver interface (`sepo.metrics.exact`) over the closed forms above: one hand,
    the agent in either seat with equal probability, tables `[12, 2]` in INFO_STATES order."""

    method = "exact closed form over the 6 deals and 5 betting sequences"
    value_name = "exploitability"

    def __init__(self, game: KuhnPoker | None = None):
        self.hands = getattr(game, "hands", 6)

    def decisions(self) -> list[Decision]:
        found = canonical_decisions(self.hands)
        return [found[key] for key in INFO_STATES]

    def evaluate(self, table) -> ExactResult:
        conv = float(nash_conv(table))
        e = conv / 2
        return ExactResult(
            value=e,
            value_name=self.value_name,
            br_payoff=e,
            agent_payoff=-e,
            method=self.method,
            extra={"nash_conv": conv, "game_value": GAME_VALUE},
        )

    def best_response(self, table) -> TabularPolicy:
        return TabularPolicy(best_response(as_policy(table)), INFO_STATES, name="BestResponse")

    def gradient(self, table) -> np.ndarray:
        return exploitability_gradient(table)

    def own_reach(self, table) -> np.ndarray:
        return own_reach(as_policy(table))

    def head_to_head(self, table, opponents) -> np.ndarray:
        return head_to_head(np.asarray(table, dtype=float), np.asarray(opponents, dtype=float))


def nash_agent(arg: str, game=None) -> TabularPolicy:
    """The agent spec `nash[:ALPHA]`: the equilibrium of the alpha family (default 1/3)."""
    from sepo.errors import SepoError

    try:
        alpha = 1.0 / 3.0 if not arg else float(arg)
        table = nash_policy(alpha)
    except ValueError as error:
        raise SepoError(f"agent 'nash:{arg}': {error}") from None
    return TabularPolicy(table, INFO_STATES, name="nash" + (f":{arg}" if arg else ""))
