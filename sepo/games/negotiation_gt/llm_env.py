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

Contexts are agent decisions met on-policy against the train pool (the table's demand drawn per
round, the bot answering); a completion's payoff to go is its round's payoff plus the expected
payoff of the remaining rounds, exact for bots that read at most the agent's last demand (the
paper's), else averaged over 16 sampled continuations. Collusion (against a collusive partner)
and externality are the round's `events.round_events` under the game's protocol, as evaluation
counts them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import CHANCE
from sepo.games.negotiation_gt.deals import DealSolver, deal_distribution
from sepo.games.negotiation_gt.events import round_events
from sepo.games.negotiation_gt.rules import make_decision

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

    def __init__(self, game, train_specs, collusive_specs):
        self.game, self.rules = game, game.rules
        self.rounds_per_rollout = game.rules.rounds
        self.all_deals = deal_distribution(self.rules)
        self.fixed = len(self.all_deals) == 1
        self.specs = list(train_specs)
        self.bots = [spec.build(game) for spec in self.specs]
        collusive = {spec.label for spec in collusive_specs}
        self.is_collusive = [spec.label in collusive for spec in self.specs]
        self._pool_index = {pool: i for i, (pool, _) in enumerate(self.rules.pools())}
        self._values_index = {v: i for i, (v, _) in enumerate(self.rules.value_distribution(self.rules.values))}
        self.solver = DealSolver(game, self.all_deals if self.fixed else self._draw(np.random.default_rng(0), 1))

    def _draw(self, rng: np.random.Generator, count: int) -> list:
        """`count` deals drawn from the deal distribution, a repeated deal weighing its count."""
        p = np.array([w for _, _, w in self.all_deals])
        drawn = np.bincount(rng.choice(len(self.all_deals), p=p / p.sum(), size=count), minlength=len(self.all_deals))
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

    def sample_contexts(self, table: np.ndarray, count: int, rng: np.random.Generator) -> list[DecisionContext]:
        """Agent decisions met on-policy: episodes on the solver's deals (drawn with their
        weights) against the train bots, the agent's demand drawn from its row each round."""
        contexts = []
        rounds = self.rules.rounds
        for _ in range(max(1, -(-count // rounds))):
            index = int(rng.integers(len(self.bots)))
            deal = int(rng.choice(len(self.solver.deals), p=self.solver.weight))
            state = self._start(deal, rng)
            for t in range(rounds):
                contexts.append(DecisionContext(self.solver.row(deal, t), index, state.clone(), deal))
                own = self._demand(table, deal, t, rng)
                other = self.bots[index].act([state.decision(1)], rng)[0].action
                state.apply_actions((own, other))
                state = self._play_to_round(state, rng)
        return contexts

    def training_decision(self, context: DecisionContext, rng: np.random.Generator):
        return context.state.decision(0)

    def context_opponent(self, context: DecisionContext):
        """Cheap talk (`sepo train --talk`): the context's opponent and its own decision this round."""
        return self.bots[context.opponent_index], context.state.decision(1)

    def outcome(self, table: np.ndarray, context: DecisionContext, decision, action: int) -> tuple[float, float, float]:
        """(expected payoff to go, collusion event, externality event) of `action`."""
        bot = self.bots[context.opponent_index]
        state = context.state.clone()
        other = max(bot.action_probabilities(state.decision(1)).items(), key=lambda kv: kv[1])[0]
        state.apply_actions((action, other))
        result = state.rounds()[-1]
        own, theirs = result.info["demands"]
        collusion, externality = round_events(self.game.protocol, np.array(own), np.array(theirs), np.array(result.info["pool"]),
                                              np.array(bool(result.info["deal"])), result.payoffs[0], result.payoffs[1],
                                              bool(self.rules.third_party))
        collusion = float(collusion) if self.is_collusive[context.opponent_index] else 0.0
        externality = float(externality)
        to_go = self._to_go(table, state, bot, np.random.default_rng(context.info_row), context.deal)
        return result.payoffs[0] + to_go, collusion, externality

    def _to_go(self, table, state, bot, rng, deal: int = 0, samples: int = 16) -> float:
        """The agent's expected payoff over the rounds left (exact for bots that read at most the
        agent's last demand; else a mean over sampled continuations)."""
        rules = self.game.rules
        if len(state.rounds()) >= rules.rounds:
            return 0.0
        if getattr(bot, "memory", None) in (0, 1) and tuple(getattr(bot, "reads", ())) in (("other",), ("own", "other")) \
                and (bot.memory == 0 or tuple(bot.reads) == ("other",)):
            return self._exact_to_go(table, state, bot, deal)
        total = 0.0
        for _ in range(samples):
            s = state.clone()
            while len(s.rounds()) < rules.rounds:
                s = self._play_to_round(s, rng)
                own = self._demand(table, deal, len(s.rounds()), rng)
                s.apply_actions((own, bot.act([s.decision(1)], rng)[0].action))
                total += s.rounds()[-1].payoffs[0]
        return total / samples

    def _exact_to_go(self, table, state, bot, deal: int) -> float:
        """Forward over the agent's previous demand (all a memory-0/other-reading bot reacts to)."""
        rules = self.game.rules
        pool, values, _ = self.solver.deals[deal]
        A = np.array(list(itertools.product(*(range(p + 1) for p in pool))))
        own = np.all(A[:, None, :] + A[None, :, :] <= np.array(pool), axis=2) * (A @ np.array(values))[:, None]  # [a, y]
        start = len(state.rounds())
        last = np.zeros(len(A))
        last[A.tolist().index(list(state.rounds()[-1].info["demands"][0]))] = 1.0
        seen = state.decision(1).observation["history"]  # the bot's side: (own, agent's, deal)
        total = 0.0
        for t in range(start, rules.rounds):
            probs = table[self.solver.row(deal, t), : len(A)]
            answers = np.zeros(len(A), dtype=int)  # the bot's demand index given the agent's previous demand
            padded = seen + (seen[-1],) * (t - len(seen))
            for i in np.nonzero(last > 0)[0]:
                history = padded[:-1] + ((padded[-1][0], tuple(int(x) for x in A[i]), padded[-1][2]),)
                view = make_decision(self.game, 1, tuple(pool), tuple(state.values[1]), history,
                                     first_values=state.first_values[1])
                answers[i] = A.tolist().index(list(rules.decode(max(bot.action_probabilities(view).items(), key=lambda kv: kv[1])[0])))
            payoff = own[:, answers]  # [a now, previous a]
            total += float(probs @ payoff @ last)
            last = probs.copy()
        return total

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {}


def environment(game, train_specs, collusive_specs):
    return NegotiationLLMEnvironment(game, train_specs, collusive_specs)
