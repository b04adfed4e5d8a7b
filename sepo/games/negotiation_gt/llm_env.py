"""Language-model SEPO in the three-item negotiation: the per-decision training environment.

The LLM trainer (`sepo.training.grpo`) reads the model's action table at a solver's information
states and charges each completion the exploitability attribution of its action there. The
model's policy is summarised by its demand distribution per deal (pool and own values) and round
(`deals.DealSolver`: one canonical decision per row, whose earlier rounds show an even split),
against which the gap, its Danskin gradient and the maximiser are exact per deal (module doc of
`deals`: exact on a fixed deal, an upper bound with a lower bound beside it over random values).

Two modes:
- a fixed deal (`--items` and `--values`): four rows, read every step;
- random deals (anything left to chance): the full distribution has thousands of rows, far too
  many to read every step, but the gap is a sum over deals and its attribution at a deal needs
  only that deal's rows. So each step `focus` draws `groups` deals from the deal distribution
  (with replacement: a deal drawn twice weighs twice), the solver is the per-deal gap over them
  (an unbiased estimate of the gap over every deal, and of its gradient), the trainer reads the
  model at those deals' rows only, and contexts are drawn from them. The final measurement uses
  64 deals drawn with a fixed seed, a deal drawn twice weighing twice (every deal when there are at most
  64; the logged `deals` counts the distinct ones).

Contexts are agent decisions met on-policy against the rollout opponents of the tabular trainer
(the train pool, and the collusive partners and exploiters of charged terms, `sepo.games.credit`;
the table's demand drawn per round, the bot answering). A completion's outcome is its payoff,
collusion events and externality events to go, each scaled by the opponent's credit for it
(`events.round_events` under the game's protocol, as evaluation counts them), over its own round and the rest
of the episode, as the tabular trainer's whole-episode rollouts count them: an opponent's reaction to the
demand in later rounds is charged to it. Its round is the expectation over the bot's whole reply distribution
(the most likely reply alone was exact for deterministic bots only); the rest is exact for bots that read
at most the agent's last demand (the paper's): a forward pass over that demand, with the bot's
whole reply distribution and, where the game redraws the opponent's values, their distribution;
for other bots a mean over 16 sampled continuations (unbiased, not exact).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from sepo.games.base import CHANCE
from sepo.games.credit import Charges, training_mixture
from sepo.games.negotiation_gt.deals import DealSolver, deal_distribution
from sepo.games.negotiation_gt.events import round_events
from sepo.games.negotiation_gt.rules import make_decision
from sepo.games.negotiation_gt.training import DealMaximiser

FINAL_DEALS = 64
"""Deals the final measurement of a random-deal run reads the model at."""


@dataclass
class DecisionContext:
    info_row: int
    opponent_index: int
    state: object
    deal: int = 0


class NegotiationLLMEnvironment:
    """The domain's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game, self.rules = game, game.rules
        self.rounds_per_rollout = game.rules.rounds
        self.all_deals = deal_distribution(self.rules)
        self.fixed = len(self.all_deals) == 1
        self.specs = list(train_specs)
        self.mixture = training_mixture(
            self.specs,
            collusive_specs,
            exploiter_specs,
            charges=charges,
            maximiser=False,
            best_response_counts=game.protocol == "rigorous",
        )
        self.bots = [spec.build(game) for spec in self.specs]
        # None: the best response
        self.extra = [None if spec is None else spec.build(game) for spec in self.mixture.extra]
        self._maximiser: tuple[tuple, object] | None = None
        self._pool_index = {pool: i for i, (pool, _) in enumerate(self.rules.pools())}
        self._values_index = {
            v: i for i, (v, _) in enumerate(self.rules.value_distribution(self.rules.values))
        }
        self.solver = DealSolver(
            game, self.all_deals if self.fixed else self._draw(np.random.default_rng(0), 1)
        )

    def _draw(self, rng: np.random.Generator, count: int) -> list:
        """`count` deals drawn from the deal distribution, a repeated deal weighing its count."""
        p = np.array([w for _, _, w in self.all_deals])
        drawn = np.bincount(
            rng.choice(len(self.all_deals), p=p / p.sum(), size=count), minlength=len(self.all_deals)
        )
        return [(pool, values, float(n)) for (pool, values, _), n in zip(self.all_deals, drawn) if n]

    def focus(self, rng: np.random.Generator, count: int | None) -> bool:
        """Draw the deals the next step trains at (`count`, the step's groups), or with `count`
        None the final measurement's; the solver and the contexts then refer to their rows.
        False on a fixed deal (its rows are always read)."""
        if self.fixed:
            return False
        if count is None:
            deals = self.all_deals if len(self.all_deals) <= FINAL_DEALS else self._draw(rng, FINAL_DEALS)
        else:
            deals = self._draw(rng, max(1, count))
        self.solver = DealSolver(self.game, deals)
        return True

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return np.repeat(self.solver.weight, self.rules.rounds)

    def _play_to_round(self, state, rng):
        while state.current_player() == CHANCE:
            outcomes = state.chance_outcomes()
            state.apply_action(outcomes[rng.choice(len(outcomes), p=[p for _, p in outcomes])][0])
        return state

    def _start(self, deal: int, rng):
        """An episode on the solver's deal `deal` (the opponent's values drawn)."""
        pool, values, _ = self.solver.deals[deal]
        state = self.game.new_initial_state()
        state.apply_action(self._pool_index[tuple(pool)])
        state.apply_action(self._values_index[tuple(values)])
        return self._play_to_round(state, rng)

    def _demand(self, table, deal: int, t: int, rng) -> int:
        pool = self.solver.deals[deal][0]
        columns = self.rules.legal(pool)
        row = table[self.solver.row(deal, t), : len(columns)]
        return columns[int(rng.choice(len(row), p=row / row.sum()))]

    def rollout_bots(self, table: np.ndarray) -> list:
        """The rollout opponents: the train bots, then those of charged terms (the deal solver's
        best response at `table`, `training.DealMaximiser`, kept for the step)."""
        table = np.asarray(table, dtype=float)
        key = (id(self.solver), table.tobytes())  # the solver changes as a step focuses on its deals
        if None in self.extra and (self._maximiser is None or self._maximiser[0] != key):
            self._maximiser = (key, DealMaximiser(self.solver, table))
        return [*self.bots, *(self._maximiser[1] if bot is None else bot for bot in self.extra)]

    def sample_contexts(
        self, table: np.ndarray, count: int, rng: np.random.Generator
    ) -> list[DecisionContext]:
        """Agent decisions met on-policy: episodes on the solver's deals (drawn with their
        weights) against the rollout opponents, the agent's demand drawn from its row each round."""
        contexts = []
        rounds = self.rules.rounds
        bots = self.rollout_bots(table)
        for _ in range(max(1, -(-count // rounds))):
            index = int(rng.integers(len(bots)))
            deal = int(rng.choice(len(self.solver.deals), p=self.solver.weight))
            state = self._start(deal, rng)
            for t in range(rounds):
                contexts.append(DecisionContext(self.solver.row(deal, t), index, state.clone(), deal))
                own = self._demand(table, deal, t, rng)
                other = bots[index].act([state.decision(1)], rng)[0].action
                state.apply_actions((own, other))
                state = self._play_to_round(state, rng)
        return contexts

    def training_decision(self, context: DecisionContext, rng: np.random.Generator):
        return context.state.decision(0)

    def context_opponent(self, context: DecisionContext):
        """Cheap talk (`sepo train --talk`): the context's opponent and its own decision this round
        (None against the best response, which has no line)."""
        n, index = len(self.bots), context.opponent_index
        bot = self.bots[index] if index < n else self.extra[index - n]
        return None if bot is None else (bot, context.state.decision(1))

    def outcome(
        self, table: np.ndarray, context: DecisionContext, decision, action: int
    ) -> tuple[float, float, float]:
        """(payoff, collusion events, externality events) to go of `action`, each scaled by the
        opponent's credit for it (module doc)."""
        o = context.opponent_index
        bot = self.rollout_bots(table)[o]
        rng = np.random.default_rng(context.info_row)
        total = np.zeros(3)
        for other, q in bot.action_probabilities(context.state.decision(1)).items():
            if q > 0:
                state = context.state.clone()
                state.apply_actions((action, other))
                total += q * (self._round(state) + self._to_go(table, state, bot, rng, context.deal))
        value, collusion, externality = total
        m = self.mixture
        return (
            float(m.utility[o] * value),
            float(m.collusion[o] * collusion),
            float(m.externality[o] * externality),
        )

    def _round(self, state) -> np.ndarray:
        """(the agent's payoff, collusion event, externality event) of the round just played."""
        result = state.rounds()[-1]
        own, theirs = result.info["demands"]
        collusion, externality = round_events(
            self.game.protocol,
            np.array(own),
            np.array(theirs),
            np.array(result.info["pool"]),
            np.array(bool(result.info["deal"])),
            result.payoffs[0],
            result.payoffs[1],
            bool(self.rules.third_party),
        )
        return np.array([result.payoffs[0], float(collusion), float(externality)])

    def _to_go(self, table, state, bot, rng, deal: int = 0, samples: int = 16) -> np.ndarray:
        """The agent's expected (payoff, collusion events, externality events) over the rounds left:
        exact for bots that read at most the agent's last demand, else a mean over sampled
        continuations."""
        rules = self.game.rules
        if len(state.rounds()) >= rules.rounds:
            return np.zeros(3)
        if (
            getattr(bot, "memory", None) in (0, 1)
            and tuple(getattr(bot, "reads", ())) in (("other",), ("own", "other"))
            and (bot.memory == 0 or tuple(bot.reads) == ("other",))
        ):
            return self._exact_to_go(table, state, bot, deal)
        total = np.zeros(3)
        for _ in range(samples):
            s = state.clone()
            while len(s.rounds()) < rules.rounds:
                s = self._play_to_round(s, rng)
                own = self._demand(table, deal, len(s.rounds()), rng)
                s.apply_actions((own, bot.act([s.decision(1)], rng)[0].action))
                total += self._round(s)
        return total / samples

    def _opponent_values(self, state) -> list[tuple[tuple[int, ...], float]]:
        """The opponent's values in each later round, with their probabilities: its current ones, or
        where the game redraws them every round, their distribution."""
        if self.rules.redraw_opponent_values:
            return self.rules.value_distribution(self.rules.opponent_values)
        return [(tuple(state.values[1]), 1.0)]

    def _stages(self, pool, values, scenarios) -> np.ndarray:
        """`[scenario, 3, agent demand, opponent demand]`: a round's (agent's payoff, collusion event,
        externality event) for each pair of demands, the opponent holding each scenario's values."""
        A = np.array(list(itertools.product(*(range(p + 1) for p in pool))))  # the legal-action order
        own, other = np.broadcast_arrays(A[:, None, :], A[None, :, :])
        deal = np.all(own + other <= np.array(pool), axis=-1)
        mine = np.where(deal, own @ np.asarray(values, dtype=float), 0.0)
        out = []
        for w, _ in scenarios:
            theirs = np.where(deal, other @ np.asarray(w, dtype=float), 0.0)
            collusion, externality = round_events(
                self.game.protocol,
                own,
                other,
                np.array(pool),
                deal,
                mine,
                theirs,
                bool(self.rules.third_party),
            )
            out.append(np.stack([mine, collusion, externality]))
        return np.array(out, dtype=float)

    def _exact_to_go(self, table, state, bot, deal: int) -> np.ndarray:
        """Forward over the agent's previous demand (all such a bot reacts to; a memory-0 agent's
        demand is distributed as its row whatever came before), with the bot's whole reply
        distribution, in every scenario of the opponent's values."""
        rules = self.game.rules
        pool = tuple(state.pool)
        A = [tuple(int(x) for x in a) for a in itertools.product(*(range(p + 1) for p in pool))]
        index = {a: k for k, a in enumerate(A)}
        scenarios = self._opponent_values(state)
        stages = self._stages(pool, state.values[0], scenarios)
        uses_values = bot.classifier.get("uses_values", True)
        if not uses_values:  # one reply in every scenario: average the round's quantities over them
            stages = np.tensordot([p for _, p in scenarios], stages, axes=1)[None]
            scenarios = [(scenarios[0][0], 1.0)]
        last = np.zeros(len(A))
        last[index[tuple(int(x) for x in state.rounds()[-1].info["demands"][0])]] = 1.0
        seen = state.decision(1).observation["history"]  # the bot's side: (own, agent's, deal)
        first = tuple(state.first_values[1])
        total = np.zeros(3)
        for t in range(len(state.rounds()), rules.rounds):
            probs = table[self.solver.row(deal, t), : len(A)]
            expected = np.einsum("a,wkay->wky", probs, stages)  # [scenario, quantity, bot demand]
            sources = np.nonzero(last > 0)[0] if bot.memory == 1 else [None]
            for i in sources:
                padded = seen + (seen[-1],) * (t - len(seen))
                if i is not None:
                    padded = padded[:-1] + ((padded[-1][0], A[i], padded[-1][2]),)
                for k, (w, p) in enumerate(scenarios):
                    view = make_decision(self.game, 1, pool, w, padded, first_values=first)
                    reply = np.zeros(len(A))
                    for demand, q in bot.action_probabilities(view).items():
                        reply[index[rules.decode(demand)]] += q
                    total += (last[i] if i is not None else 1.0) * p * (expected[k] @ reply)
            last = probs.copy()
        return total

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {}
