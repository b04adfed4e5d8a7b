"""The two-bidder auction as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent met on-policy: episodes are played between the
agent's current action table and the tabular environment's rollout opponents (`training.py`: the
train pool and the current gap maximiser, drawn uniformly, the seat too), and every agent
decision becomes a context that keeps the whole game state (both values, the history, the seat,
the opponent). A completion's payoff to go is the exact expectation of the rest of the episode
given its bid (the opponent's bid and the tie coin this round, then fresh values, the agent's
table and the opponent for the remaining rounds): a variance-free stand-in for sampling the
rest. Its collusion and externality are the expected events to go, by the same expectation
(`events.round_events` under the game's protocol, as evaluation counts them, over this round and
the rest of the episode): an opponent's reaction to
the bid in later rounds is charged to it, as the tabular trainer's whole-episode rollouts charge
it. The opponents and each one's credits for payoff, collusion and externality are the tabular
environment's (`sepo.games.credit`), so the charged c and x are evaluation's. The prompts show whole
histories, so the solver's keys must too: train models with `--memory rounds-1` (few rounds).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.games.auction.events import round_events
from sepo.games.auction.training import AuctionTrainingEnvironment
from sepo.games.base import CHANCE, SIMULTANEOUS
from sepo.games.credit import Charges


@dataclass
class DecisionContext:
    """One agent decision with the state behind it."""

    info_row: int
    seat: int
    opponent_index: int
    state: object


class AuctionLLMEnvironment:
    """The auction's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.tabular = AuctionTrainingEnvironment(
            game, train_specs, collusive_specs, exploiter_specs, charges
        )
        self.solver = self.tabular.solver
        self.rounds_per_rollout = game.rules.rounds
        self.keys, self.row = self.tabular.keys, self.tabular.row
        self._opponents: tuple[bytes, list] | None = None

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.tabular.training_reach(table)

    def opponents(self, table: np.ndarray) -> list:
        """The rollout opponents at `table` (kept for the step's calls)."""
        table = np.asarray(table, dtype=float)
        if self._opponents is None or self._opponents[0] != table.tobytes():
            self._opponents = (table.tobytes(), self.tabular.rollout_opponents(table))
        return self._opponents[1]

    def sample_contexts(
        self, table: np.ndarray, count: int, rng: np.random.Generator
    ) -> list[DecisionContext]:
        rules = self.game.rules
        opponents = self.opponents(table)
        contexts = []
        for _ in range(max(1, -(-count // rules.rounds))):
            seat, index = int(rng.integers(2)), int(rng.integers(len(opponents)))
            state = self.game.new_initial_state()
            while not state.is_terminal():
                if state.current_player() == CHANCE:
                    outcomes = state.chance_outcomes()
                    state.apply_action(outcomes[rng.choice(len(outcomes), p=[p for _, p in outcomes])][0])
                    continue
                row = self.row[state.decision(seat).info_key]
                contexts.append(DecisionContext(row, seat, index, state.clone()))
                bid = int(rng.choice(len(table[row]), p=table[row] / table[row].sum()))
                other = opponents[index].act([state.decision(1 - seat)], rng)[0].action
                state.apply_actions((bid, other) if seat == 0 else (other, bid))
        return contexts

    def training_decision(self, context: DecisionContext, rng: np.random.Generator):
        return context.state.decision(context.seat)

    def outcome(
        self, table: np.ndarray, context: DecisionContext, decision, action: int
    ) -> tuple[float, float, float]:
        """(payoff, collusion events, externality events) to go of `action`, exact, each scaled by
        the opponent's credit (module doc)."""
        index, seat, state = context.opponent_index, context.seat, context.state
        mixture = self.tabular.mixture
        credit = np.array([mixture.utility[index], mixture.collusion[index], mixture.externality[index]])
        # e.g. the gap maximiser without an externality charge: the exploitability charge only
        if not credit.any():
            return 0.0, 0.0, 0.0
        opponent = self.opponents(table)[index]
        total = np.zeros(3)
        for other, p in opponent.action_probabilities(state.decision(1 - seat)).items():
            if p == 0:
                continue
            child = state.clone()
            child.apply_actions((action, other) if seat == 0 else (other, action))
            for settled, q in _settle(child):
                total += p * q * (self._round(settled, seat) + self._to_go(table, settled, seat, opponent))
        value, collusion, externality = credit * total
        return float(value), float(collusion), float(externality)

    def _round(self, settled, seat) -> np.ndarray:
        """(the agent's payoff, collusion event, externality event) of the round just settled; no
        events where they do not apply (rigorous, no benchmark), as evaluation counts them."""
        result = settled.rounds()[-1]
        found = round_events(self.game.protocol, result, seat)
        return np.array([result.payoffs[seat], *(found if found is not None else (0.0, 0.0))], dtype=float)

    def _to_go(self, table, state, seat, bot) -> np.ndarray:
        """The expected (payoff, collusion events, externality events) over the remaining rounds
        from a state between rounds."""
        total = np.zeros(3)
        if state.is_terminal():
            return total
        for values, p_values in _values(state):
            agent_probs = table[self.row[values.decision(seat).info_key]]
            for other, p_other in bot.action_probabilities(values.decision(1 - seat)).items():
                for bid, p_bid in enumerate(agent_probs):
                    if p_other * p_bid == 0:
                        continue
                    child = values.clone()
                    child.apply_actions((bid, other) if seat == 0 else (other, bid))
                    for settled, q in _settle(child):
                        total += (
                            p_values
                            * p_other
                            * p_bid
                            * q
                            * (self._round(settled, seat) + self._to_go(table, settled, seat, bot))
                        )
        return total

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {"utility_exact": self.tabular.exact_metrics(table)["utility"]}


def _settle(state):
    """The states after the round's tie draw (if any), with their probabilities."""
    if state.tie_pending():
        for winner, p in state.chance_outcomes():
            child = state.clone()
            child.apply_action(winner)
            yield child, p
    else:
        yield state, 1.0


def _values(state):
    """Every draw of the round's values (one chance node per bidder), with its probability."""
    frontier = [(state, 1.0)]
    while frontier and frontier[0][0].current_player() == CHANCE:
        expanded = []
        for s, p in frontier:
            for outcome, q in s.chance_outcomes():
                child = s.clone()
                child.apply_action(outcome)
                expanded.append((child, p * q))
        frontier = expanded
    assert all(s.current_player() == SIMULTANEOUS for s, _ in frontier)
    return frontier
