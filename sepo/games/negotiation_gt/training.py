"""The three-item negotiation as a training environment for the exact tabular SEPO trainer.

The agent is a table with one demand distribution per (deal, round), a deal being the pool and
the agent's values (`deals.DealSolver`: the exploitability value, its Danskin gradient and
maximisers, exact for that parameterization). Its states are the game's information states
under `--memory 0`, so the trained table plays in evaluation as it was trained.

Deals: every pool and value vector of the game (64 x 36 = 2,304 deals, 9,216 rows with the
paper's sizes), or the ones `--items` / `--values` fix (one pool: 36 deals; a fixed deal: one).

A group shares its opponent (uniform over the train pool, and, when λc or λx is charged, the
collusive partners and exploiters evaluation counts them against, `sepo.games.credit`; under
rigorous the deal solver's best response to the current table, `DealMaximiser`, stands for
evaluation's BestResponse), its deal and the opponent's values (drawn from their distributions);
its rollouts are whole episodes that differ in the agent's demands. Every rollout visits each
round of its deal once whatever the opponent does, so the training reach of row (deal, t) is
p(deal) and, unlike the games whose best response steers into unvisited histories, no maximiser
needs to join the rollouts for the exploitability charge. Utility is the agent's payoff per round
against the train pool; collusion (against the collusive pool) and externality (against the train
and exploiter pools) are `events.round_events`, the definitions evaluation uses, each rollout's
scaled by its opponent's credit for it.

The train bots are played, and the utility against them computed exactly, through their
response to the agent's previous demand: bots that read at most the other's last demand (the
paper's five do). The exact utility forward needs nothing else, because a memory-0 agent's
previous demand is distributed as its previous row.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.credit import Charges, training_mixture
from sepo.games.negotiation_gt.bots import NegotiationBot
from sepo.games.negotiation_gt.deals import DealSolver
from sepo.games.negotiation_gt.events import round_events
from sepo.games.records import Rollouts


def _reads_at_most_last_other(bot) -> bool:
    memory, reads = getattr(bot, "memory", None), tuple(getattr(bot, "reads", ()))
    return memory == 0 or (memory == 1 and reads == ("other",))


class BotResponses:
    """A bot's demand distribution per pool, round, its own values and the agent's previous
    demand: `table[pool][t]` is [opponent values (1 if the bot ignores them), previous agent
    demand (1 in round 1 or for a memory-0 bot), bot demand]."""

    def __init__(self, bot, game, W):
        if not isinstance(bot, NegotiationBot) or not _reads_at_most_last_other(bot):
            raise SepoError(
                f"the tabular negotiation-gt trainer plays bots that read at most the other's last demand; "
                f"{getattr(bot, 'name', bot)!r} reads more"
            )
        self.bot, self.rules = bot, game.rules
        self.uses_values = bot.classifier.get("uses_values", True)
        if self.uses_values and self.rules.redraw_opponent_values and type(bot).__name__ != "GreedyNeg":
            raise SepoError(
                f"with the opponent's values redrawn every round the tabular trainer plays bots that ignore "
                f"their values (or keep their first ones, as GreedyNeg); {bot.name!r} reads them"
            )
        self.W = W if self.uses_values else W[:1]
        self.table: dict[tuple, list[np.ndarray]] = {}

    def of(self, block) -> list[np.ndarray]:
        if block.pool not in self.table:
            self.table[block.pool] = [self._round(block, t) for t in range(self.rules.rounds)]
        return self.table[block.pool]

    def _round(self, block, t) -> np.ndarray:
        pool, A = block.pool, block.A.astype(int)
        index = {tuple(a): i for i, a in enumerate(A.tolist())}
        reacts = t > 0 and self.bot.memory == 1
        previous = [tuple(a) for a in A.tolist()] if reacts else [tuple(p // 2 for p in pool)]
        mine = tuple(p - p // 2 for p in pool)  # never read: these bots read at most the other's last demand
        out = np.zeros((len(self.W), len(previous), block.n))
        for wi, w in enumerate(self.W):
            w = tuple(int(x) for x in w)
            for pi, agent in enumerate(previous):
                history = ((mine, agent, self.rules.deal(pool, mine, agent)),) * t
                obs = {
                    "round": t + 1,
                    "rounds": self.rules.rounds,
                    "pool": pool,
                    "values": w,
                    "first_values": w,
                    "total": self.rules.total,
                    "history": history,
                }
                for demand, p in self.bot.demand_distribution(_View(obs)).items():
                    out[wi, pi, index[tuple(int(x) for x in demand)]] += p
        return out


class _View:
    __slots__ = ("observation",)

    def __init__(self, observation):
        self.observation = observation


class DealMaximiser(NegotiationBot):
    """The deal solver's best response to a table (`DealSolver.best_response`: exact on a fixed
    deal, else the opponent that best-responds to the prior over the agent's values) as a bot of
    the domain: a demand per pool, round and own values, whatever the agent did before."""

    name = "BestResponse"
    memory = 0
    reads = ("other",)
    classifier = {"uses_values": True, "stochastic": False}

    def __init__(self, solver: DealSolver, table: np.ndarray):
        super().__init__()
        self.inner = solver.best_response(table)

    def demand(self, obs) -> tuple[int, ...]:
        return self.inner.demand(_View(obs))


class NegotiationGTTrainingEnvironment:
    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        if game.rules.memory != 0:
            raise SepoError(
                "negotiation-gt tabular training learns one demand distribution per deal and round: "
                "pass --memory 0 (its information states)"
            )
        self.game, self.rules = game, game.rules
        self.solver = DealSolver(game)
        self.keys = tuple(d.info_key for d in self.solver.decisions())
        self.legal = self.solver.legal_mask()
        self.scale = game.payoff_scale
        self.specs = list(train_specs)
        if not self.specs:
            raise SepoError("the tabular negotiation-gt trainer needs a train pool")
        self.bots = [BotResponses(spec.build(game), game, self.solver.W) for spec in self.specs]
        self.mixture = training_mixture(
            self.specs,
            collusive_specs,
            exploiter_specs,
            charges=charges,
            maximiser=False,
            best_response_counts=game.protocol == "rigorous",
        )
        self.extra = [None if spec is None else BotResponses(spec.build(game), game, self.solver.W)
                      for spec in self.mixture.extra]  # None: the best response to the current table
        self._maximiser: tuple[bytes, BotResponses] | None = None
        self.block_of = np.zeros(len(self.solver.deals), dtype=int)
        self.slot_of = np.zeros(len(self.solver.deals), dtype=int)
        for k, b in enumerate(self.solver.blocks):
            self.block_of[b.deal_ids] = k
            self.slot_of[b.deal_ids] = np.arange(len(b.deal_ids))

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return np.repeat(self.solver.weight, self.rules.rounds)

    def utility(self, table: np.ndarray) -> float:
        """The agent's exact expected payoff per round, averaged over the train bots (module doc)."""
        table = np.asarray(table, dtype=float)
        T, total = self.rules.rounds, 0.0
        for responses in self.bots:
            for b in self.solver.blocks:
                rounds = responses.of(b)
                pw = self.solver.pw if responses.uses_values else np.ones(1)
                for t in range(T):
                    pi = table[b.rows[:, t], : b.n]  # [deals, a]
                    reply = np.einsum("w,wpy->py", pw, rounds[t])  # [previous, y]
                    accept = reply @ b.deal.T  # [previous, a]: the probability of a deal
                    if accept.shape[0] == 1:
                        deal_a = np.broadcast_to(accept, pi.shape)
                    else:
                        deal_a = table[b.rows[:, t - 1], : b.n] @ accept
                    total += float((self.solver.weight[b.deal_ids] * (pi * deal_a * b.Av).sum(1)).sum())
        return total / (T * len(self.bots))

    def exact_metrics(self, table: np.ndarray) -> dict:
        result = self.solver.evaluate(table)
        return {
            "utility": self.utility(table),
            result.value_name: result.value,
            "br_payoff": result.br_payoff,
            "value_exact": float(result.exact),
            "value_upper_bound": float(not result.exact),
            **{k: v for k, v in result.extra.items() if k == "gap_lower_bound"},
        }

    def events(self, own, other, pool, deal, mine, theirs):
        """Per round (demands `[rounds, 3]`, deal flags, both payoffs): (collusion event, externality
        event) under the game's protocol, `events.round_events`."""
        return round_events(
            self.game.protocol,
            np.asarray(own),
            np.asarray(other),
            np.asarray(pool),
            np.asarray(deal, dtype=bool),
            np.asarray(mine),
            np.asarray(theirs),
            bool(self.rules.third_party),
        )

    def rollout_bots(self, table: np.ndarray) -> list[BotResponses]:
        """The rollout opponents' responses: the train bots, then those of charged terms (the best
        response's at `table`, kept for the step)."""
        table = np.asarray(table, dtype=float)
        if None in self.extra and (self._maximiser is None or self._maximiser[0] != table.tobytes()):
            self._maximiser = (
                table.tobytes(),
                BotResponses(DealMaximiser(self.solver, table), self.game, self.solver.W),
            )
        return [*self.bots, *(self._maximiser[1] if bot is None else bot for bot in self.extra)]

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        table = np.asarray(table, dtype=float)
        solver, rules, T = self.solver, self.rules, self.rules.rounds
        bots = self.rollout_bots(table)
        group_bot = rng.integers(self.mixture.size, size=groups)
        group_deal = rng.choice(len(solver.deals), p=solver.weight, size=groups)
        group_w = rng.choice(len(solver.W), p=solver.pw, size=(groups, T))
        if not rules.redraw_opponent_values:
            group_w[:, 1:] = group_w[:, :1]
        group_of = np.repeat(np.arange(groups), group_size)
        n = len(group_of)
        deal_of, bot_of = group_deal[group_of], group_bot[group_of]
        states = (deal_of[:, None] * T + np.arange(T)[None, :])
        actions = np.zeros((n, T), dtype=int)
        cumulative = np.cumsum(table, axis=1)
        draws = rng.random((n, T, 2))
        for t in range(T):
            rows = states[:, t]
            actions[:, t] = np.minimum((cumulative[rows] < draws[:, t, :1] * cumulative[rows, -1:]).sum(1),
                                       self.legal[rows].sum(1) - 1)
        utility, collusion, externality = np.zeros(n), np.zeros(n), np.zeros(n)
        for r in range(n):
            deal, bot = deal_of[r], bots[bot_of[r]]
            b = solver.blocks[self.block_of[deal]]
            responses = bot.of(b)
            w_first = group_w[group_of[r], 0] if bot.uses_values else 0
            own, other = b.A[actions[r]].astype(int), np.zeros((T, 3), dtype=int)
            for t in range(T):
                reply = responses[t][w_first, actions[r, t - 1] if responses[t].shape[1] > 1 else 0]
                cum = np.cumsum(reply)
                other[t] = b.A[
                    min(int(np.searchsorted(cum, draws[r, t, 1] * cum[-1], side="right")), b.n - 1)
                ]
            deal_now = (own + other <= np.array(b.pool)).all(1)
            mine = np.where(deal_now, own @ np.asarray(solver.deals[deal][1], dtype=float), 0.0)
            theirs = np.where(deal_now, (other * solver.W[group_w[group_of[r]]]).sum(1), 0.0)
            c, x = self.events(own, other, b.pool, deal_now, mine, theirs)
            utility[r] = self.mixture.utility[bot_of[r]] * mine.mean()
            collusion[r] = self.mixture.collusion[bot_of[r]] * c.mean()
            externality[r] = self.mixture.externality[bot_of[r]] * x.mean()
        return Rollouts(
            states, actions, np.ones_like(states, dtype=bool), group_of, utility, collusion, externality
        )
