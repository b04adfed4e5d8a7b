"""Repeated matching pennies, written as a plug-in domain by a test (nothing in sepo/ knows it).

Each round both players choose HEADS or TAILS at once; player 0 (the matcher) wins 1 if the coins
match and loses 1 otherwise. `rounds` rounds per episode. The agent's information state is the
round number (it does not condition on history), so its best response is per round:
the mismatching coin against the agent's likelier one.
"""
from __future__ import annotations

import re

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import SIMULTANEOUS, TERMINAL, Decision, Game, ParseResult, RoundResult, State, TextView
from sepo.games.disguise import DisguiseTerms
from sepo.games.records import Rollouts
from sepo.games.registry import Domain, Param
from sepo.metrics.exact import ExactResult, action_table
from sepo.policies.base import Policy

HEADS, TAILS = 0, 1
NAMES = ("HEADS", "TAILS")


def stage_payoff(a0: int, a1: int) -> float:
    return 1.0 if a0 == a1 else -1.0


class PenniesState(State):
    def __init__(self, game: "Pennies"):
        self.game = game
        self.history: list[tuple[int, int]] = []

    def num_players(self) -> int:
        return 2

    def current_player(self) -> int:
        return TERMINAL if len(self.history) >= self.game.rounds else SIMULTANEOUS

    def decision(self, player: int) -> Decision:
        t = len(self.history)
        return Decision(
            game="pennies",
            player=player,
            info_key=f"{'ro'[player]}{t}",
            legal_actions=(HEADS, TAILS),
            action_names=NAMES,
            observation={
                "round": t,
                "rounds": self.game.rounds,
                "player": player,
                "history": tuple(self.history),
            },
        )

    def apply_action(self, action: int) -> None:
        raise ValueError("pennies: moves are simultaneous; use apply_actions")

    def apply_actions(self, actions) -> None:
        a0, a1 = actions
        if a0 not in (HEADS, TAILS) or a1 not in (HEADS, TAILS):
            raise ValueError(f"pennies: illegal joint action {actions!r}")
        self.history.append((a0, a1))

    def rounds(self) -> list[RoundResult]:
        return [RoundResult(payoffs=(stage_payoff(a, b), -stage_payoff(a, b))) for a, b in self.history]

    def clone(self) -> "PenniesState":
        copy = PenniesState(self.game)
        copy.history = list(self.history)
        return copy


class PenniesText(TextView):
    _WORD = re.compile(r"\b(HEADS|TAILS)\b", re.IGNORECASE)

    def system_prompt(self) -> str:
        return "Matching pennies, several rounds. Reply with HEADS or TAILS on the last line."

    def user_prompt(self, decision: Decision) -> str:
        return (
            f"Round {decision.observation['round'] + 1} of {decision.observation['rounds']}. HEADS or TAILS?"
        )

    def parse(self, reply: str, decision: Decision) -> ParseResult:
        lines = [line for line in reply.splitlines() if line.strip()]
        found = tuple(dict.fromkeys(w.upper() for w in self._WORD.findall(lines[-1]))) if lines else ()
        if not found:
            return ParseResult("no_action")
        if len(found) > 1:
            return ParseResult("ambiguous", names_found=found)
        return ParseResult("ok", decision.action_named(found[0]), found)

    def answer_text(self, decision: Decision, action: int) -> str:
        return decision.name_of(action)

    def disguise_terms(self) -> DisguiseTerms:
        """The plug-in's opt-in to disguised variants: its name and its two action words."""
        return DisguiseTerms(game=("Matching pennies",), actions=("HEADS", "TAILS"))


class Pennies(Game):
    name = "pennies"
    num_players = 2
    max_payoff = 1.0
    zero_sum = True

    def __init__(self, rounds: int = 3):
        self.rounds = rounds
        self._text = PenniesText()

    def new_initial_state(self) -> PenniesState:
        return PenniesState(self)

    @property
    def text(self) -> TextView:
        return self._text


def make_game(protocol: str = "rigorous", rounds: int = 3) -> Pennies:
    if rounds < 1:
        raise SepoError(f"--rounds must be >= 1, got {rounds}")
    return Pennies(rounds)


class Biased(Policy):
    """HEADS with probability p, every round."""

    name = "Biased"
    classifier = {"stochastic": True, "memory": 0}

    def __init__(self, p: float = 0.5):
        if not 0 <= p <= 1:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = p

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return {HEADS: self.p, TAILS: 1.0 - self.p}


class AlwaysHeads(Biased):
    name = "AlwaysHeads"
    classifier = {"stochastic": False, "memory": 0}

    def __init__(self):
        super().__init__(1.0)


class Copycat(Policy):
    """Plays the other player's previous coin (HEADS first)."""

    name = "Copycat"
    classifier = {"stochastic": False, "memory": 1}

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        history = decision.observation["history"]
        last = history[-1][1 - decision.observation["player"]] if history else HEADS
        return {HEADS: float(last == HEADS), TAILS: float(last == TAILS)}


BOTS = {cls.name: cls for cls in (Biased, AlwaysHeads, Copycat)}


def pools(protocol: str, game) -> dict:
    return {"train": ["AlwaysHeads", "Biased(p=0.7)"], "exploiter": ["Copycat"], "collusive": ["AlwaysHeads"]}


def is_collusive(action) -> bool:
    """The (made-up) collusion event of this fixture: playing TAILS."""
    return action == TAILS


def events(protocol: str, episode) -> dict:
    return {
        "collusion_events": sum(is_collusive(d.action) for d in episode.decisions),
        "collusion_denominator": len(episode.decisions),
        "externality_events": 0,
        "externality_denominator": 0,
    }


def frequencies(episodes) -> dict:
    decisions = [d for e in episodes for d in e.decisions]
    return {"pennies/heads_rate": sum(d.action == HEADS for d in decisions) / max(len(decisions), 1)}


class RoundResponse(Policy):
    """A per-round table for the opponent seat (the best response)."""

    name = "BestResponse"

    def __init__(self, actions):
        self.actions = list(actions)

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        best = self.actions[decision.observation["round"]]
        return {HEADS: float(best == HEADS), TAILS: float(best == TAILS)}


class PenniesSolver:
    """Exact: against a round-indexed agent the opponent's best response is per round."""

    method = "per-round best response (the agent ignores history)"
    value_name = "exploitability"

    def __init__(self, game: Pennies):
        self.game = game

    def decisions(self) -> list[Decision]:
        return [Decision("pennies", 0, f"r{t}", (HEADS, TAILS), NAMES,
                         {"round": t, "rounds": self.game.rounds, "player": 0, "history": ()})
                for t in range(self.game.rounds)]

    @staticmethod
    def _opponent_values(table):
        table = np.asarray(table, dtype=float)
        # u_O(b) per round = -Σ_a π(a) u(a, b)
        return np.stack(
            [
                -(table[:, HEADS] * stage_payoff(HEADS, b) + table[:, TAILS] * stage_payoff(TAILS, b))
                for b in (HEADS, TAILS)
            ],
            axis=1,
        )

    def evaluate(self, table) -> ExactResult:
        best = self._opponent_values(table).max(1).mean()
        return ExactResult(float(best), self.value_name, float(best), float(-best), self.method)

    def best_response(self, table) -> Policy:
        return RoundResponse(self._opponent_values(table).argmax(1))

    def gradient(self, table) -> np.ndarray:
        choice = self._opponent_values(table).argmax(1)
        return np.stack([[-stage_payoff(a, b) for a in (HEADS, TAILS)] for b in choice]) / len(choice)

    def own_reach(self, table) -> np.ndarray:
        return np.ones(len(table))

    def head_to_head(self, table, opponents) -> np.ndarray:
        table, opponents = np.asarray(table, float), np.asarray(opponents, float)
        match = (table * opponents).sum(-1)
        return (2 * match - 1).mean(-1)


class PenniesTraining:
    """Vectorised episodes against memoryless pool bots (their round-by-round tables)."""

    def __init__(self, game: Pennies, train_specs, collusive_specs):
        self.solver = PenniesSolver(game)
        self.keys = tuple(d.info_key for d in self.solver.decisions())
        self.legal = np.ones((game.rounds, 2), dtype=bool)
        self.scale = game.payoff_scale
        decisions = self.solver.decisions()
        self.opponents = np.stack([action_table(spec.build(game), decisions) for spec in train_specs])
        collusive = {spec.label for spec in collusive_specs}
        self.is_collusive = np.array([spec.label in collusive for spec in train_specs])

    def training_reach(self, table):
        return np.ones(len(table))

    def rollouts(self, table, groups: int, group_size: int, rng) -> Rollouts:
        opponent = rng.integers(len(self.opponents), size=groups)
        group_of = np.repeat(np.arange(groups), group_size)
        rounds = table.shape[0]
        mine = (rng.random((len(group_of), rounds)) >= table[None, :, HEADS]).astype(int)
        theirs = (rng.random((len(group_of), rounds)) >= self.opponents[opponent[group_of], :, HEADS]).astype(
            int
        )
        utility = np.where(mine == theirs, 1.0, -1.0).mean(1)
        collusion = np.where(self.is_collusive[opponent[group_of]], is_collusive(mine).mean(1), 0.0)
        states = np.broadcast_to(np.arange(rounds), mine.shape)
        return Rollouts(
            states, mine, np.ones(mine.shape, bool), group_of, utility, collusion, np.zeros(len(group_of))
        )

    def exact_metrics(self, table) -> dict:
        utility = float(self.solver.head_to_head(table, self.opponents).mean())
        return {"utility": utility, "exploitability": self.solver.evaluate(table).value}


DOMAIN = Domain(
    name="pennies",
    description="repeated matching pennies (a test's plug-in)",
    make_game=make_game,
    params=(Param("rounds", int, 3, "pennies: rounds per episode."),),
    bots=lambda: BOTS,
    pools=pools,
    events=events,
    frequencies=frequencies,
    solver=PenniesSolver,
    training=PenniesTraining,
    simultaneous=True,
    zero_sum=True,
)
