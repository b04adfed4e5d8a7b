"""The exact adversarial gap of a policy that reads only its deal and the round (memory 0 per deal).

A deal is what the agent knows when an episode starts: the item pool and its own values. A
policy summarised per deal has one demand distribution per (deal, round): pi_t(a | pool, v). It
is the tabular trainer's parameterization and the language-model trainer's summary of a model.

Against such a policy the opponent's demands never change the agent's play, so a maximiser of
the gap u_O - u_A may choose round by round. If it also knows the agent's values, its choice in
round t, with its own values w, is

    y*(pool, v, t, w) = argmax_y  sum_a pi_t(a | pool, v) deal(a, y) (y.w - a.v)

and the gap decomposes by deal: e_inf(pi) = sum_deals p(deal) sum_t max_y(...) / T, exact, with
the Danskin gradient d e_inf / d pi_t(a | deal) = p(deal) E_w[deal(a, y*) (y*.w - a.v)] / T.
That informed opponent is stronger than the game's (which never sees v and can only infer it from
the agent's demands), so e_inf is an UPPER bound on the adversarial gap; the two are equal when
the agent's values are fixed (`--values`). The opponent that ignores what the demands reveal and
best-responds to the prior over v, y(pool, t, w) = argmax_y E_v[...], is a strategy of the real
game, so its gap is a LOWER bound (reported as `gap_lower_bound`; its policy is `best_response`).
The exact gap in between needs the opponent's posterior over v after every demand sequence
(`exact.DPSearch`), which is out of reach for a full-support table over many deals.

Rows: deal d = (pool, values) in the order of `deals`, row d * rounds + t; columns follow each
row's legal actions (the pool's demands), padded to the widest pool.
"""
from __future__ import annotations

import itertools

import numpy as np

from sepo.errors import SepoError
from sepo.games.negotiation_gt.rules import make_decision
from sepo.metrics.exact import ExactResult
from sepo.policies.base import Policy


def deal_distribution(rules) -> list[tuple[tuple[int, ...], tuple[int, ...], float]]:
    """Every (pool, agent values) with its probability: the pools of `rules.pools()` times the
    values of `rules.value_distribution(rules.values)` (a fixed `--items` or `--values` is one)."""
    return [(pool, values, p_pool * p_values) for pool, p_pool in rules.pools()
            for values, p_values in rules.value_distribution(rules.values)]


class _PoolBlock:
    """The deals that share a pool: their rows and the pool's demand geometry."""

    def __init__(self, pool, deal_ids, values, W, rounds):
        self.pool = tuple(pool)
        self.deal_ids = np.array(deal_ids)
        # legal-action order
        self.A = np.array(list(itertools.product(*(range(p + 1) for p in pool))), dtype=float)
        self.n = len(self.A)
        # [a, y]
        self.deal = np.all(self.A[:, None, :] + self.A[None, :, :] <= np.array(pool), axis=2).astype(float)
        self.YW = self.A @ W.T  # [y, w]: the opponent's value of its demand
        self.Av = np.array([self.A @ np.asarray(v, dtype=float) for v in values])  # [deals, a]: the agent's
        self.rows = (self.deal_ids[:, None] * rounds + np.arange(rounds)[None, :])  # [deals, T]


class DealSolver:
    """The per-deal gap (module doc) over `deals` [(pool, values, probability)], default the
    game's whole deal distribution; the opponent's values follow the game's distribution."""

    value_name = "adversarial_gap"

    def __init__(self, game, deals=None):
        rules = game.rules
        self.game, self.rules, self.T = game, rules, rules.rounds
        self.deals = list(deal_distribution(rules) if deals is None else deals)
        if not self.deals:
            raise SepoError("negotiation-gt: no deal to train on")
        weights = np.array([p for _, _, p in self.deals], dtype=float)
        self.weight = weights / weights.sum()
        dist = rules.value_distribution(rules.opponent_values)
        self.W = np.array([w for w, _ in dist], dtype=float)
        self.pw = np.array([p for _, p in dist])
        by_pool: dict[tuple, list[int]] = {}
        for i, (pool, _, _) in enumerate(self.deals):
            by_pool.setdefault(tuple(pool), []).append(i)
        self.blocks = [
            _PoolBlock(pool, ids, [self.deals[i][1] for i in ids], self.W, self.T)
            for pool, ids in by_pool.items()
        ]
        self.width = max(b.n for b in self.blocks)
        self.values_fixed = len({tuple(v) for _, v, _ in self.deals}) == 1
        self.method = (
            "exact gap of the per-round demand distribution on a fixed deal (memory 0)"
            if len(self.deals) == 1
            else f"exact gap of a per-(deal, round) demand distribution over {len(self.deals)} deals against "
                 "an opponent "
            + (
                "that knows the pool"
                if self.values_fixed
                else "that also knows the agent's values: an upper bound on the adversarial gap "
                "(gap_lower_bound: the opponent that best-responds to the prior over them)"
            )
        )
        self._decisions = None
        self._cache: tuple[bytes, dict] | None = None

    @property
    def rows(self) -> int:
        return len(self.deals) * self.T

    def row(self, deal_index: int, round_index: int) -> int:
        return deal_index * self.T + round_index

    def legal_mask(self) -> np.ndarray:
        mask = np.zeros((self.rows, self.width), dtype=bool)
        for b in self.blocks:
            mask[b.rows.reshape(-1), : b.n] = True
        return mask

    def decisions(self):
        """One canonical decision per row: the deal, the round, earlier rounds an even split."""
        if self._decisions is None:
            found = []
            for pool, values, _ in self.deals:
                half = tuple(int(p) // 2 for p in pool)
                rest = tuple(int(p) - h for p, h in zip(pool, half))
                for t in range(self.T):
                    paid = (float(np.dot(half, values)),) * t
                    found.append(
                        make_decision(
                            self.game,
                            0,
                            tuple(pool),
                            tuple(values),
                            ((half, rest, True),) * t,
                            my_payoffs=paid,
                        )
                    )
            self._decisions = found
        return self._decisions

    # -- the maximisers ----------------------------------------------------------------------------
    def _solve(self, table) -> dict:
        """Per row: the informed maximiser per opponent value, its gap and both payoffs; per pool
        and round the uninformed maximiser; the opponent-payoff maximiser's payoffs."""
        table = np.asarray(table, dtype=float)
        if table.shape[0] != self.rows:
            raise SepoError(f"a negotiation-gt deal table has {self.rows} rows, got {table.shape[0]}")
        key = table.tobytes()
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        out = {
            "best": {},
            "gap": np.zeros(self.rows),
            "opp": np.zeros(self.rows),
            "own": np.zeros(self.rows),
            "br_opp": np.zeros(self.rows),
            "br_own": np.zeros(self.rows),
            "prior_best": {},
            "prior_gap": np.zeros(self.rows),
        }
        w_index = np.arange(len(self.W))
        for b in self.blocks:
            rows = b.rows.reshape(-1)
            pi = table[rows, : b.n]  # [R, a]
            Av = np.repeat(b.Av, self.T, axis=0)  # [R, a]
            m = pi @ b.deal  # [R, y]: the probability of a deal
            c = (pi * Av) @ b.deal  # [R, y]: the agent's expected payoff
            opp = m[:, :, None] * b.YW[None]  # [R, y, w]
            own = np.broadcast_to(c[:, :, None], opp.shape)
            score = opp - own
            best = score.argmax(1)  # [R, w]
            pick = lambda x, y: np.take_along_axis(x, y[:, None, :], axis=1)[:, 0, :] @ self.pw  # noqa: E731
            out["best"][b.pool] = best
            out["gap"][rows], out["opp"][rows], out["own"][rows] = (
                pick(score, best),
                pick(opp, best),
                pick(own, best),
            )
            greedy = _least_to_agent(opp, own)
            out["br_opp"][rows], out["br_own"][rows] = pick(opp, greedy), pick(own, greedy)
            # the opponent that knows only the prior over the agent's values: per round, sum over the pool's
            # deals
            weights = self.weight[b.deal_ids]
            prior = np.einsum(
                "d,dtyw->tyw", weights, score.reshape(len(b.deal_ids), self.T, b.n, len(self.W))
            )
            prior_best = prior.argmax(1)  # [T, w]
            out["prior_best"][b.pool] = prior_best
            chosen = score.reshape(len(b.deal_ids), self.T, b.n, len(self.W))[
                :, np.arange(self.T)[:, None], prior_best, w_index
            ]
            out["prior_gap"][rows] = (chosen @ self.pw).reshape(-1)
        self._cache = (key, out)
        return out

    def _mean(self, per_row: np.ndarray) -> float:
        return float((per_row.reshape(len(self.deals), self.T).sum(1) * self.weight).sum() / self.T)

    def evaluate(self, table, **_) -> ExactResult:
        s = self._solve(table)
        extra = {
            "agent_payoff_vs_gap_maximiser": self._mean(s["own"]),
            "opponent_payoff_vs_gap_maximiser": self._mean(s["opp"]),
            "deals": len(self.deals),
        }
        if not self.values_fixed:
            extra["gap_lower_bound"] = self._mean(s["prior_gap"])
        return ExactResult(
            value=self._mean(s["gap"]),
            value_name=self.value_name,
            br_payoff=self._mean(s["br_opp"]),
            agent_payoff=self._mean(s["br_own"]),
            method=self.method,
            exact=self.values_fixed,
            extra=extra,
        )

    def gradient(self, table) -> np.ndarray:
        """d e_inf / d table (Danskin: the maximisers held fixed)."""
        s = self._solve(table)
        grad = np.zeros(np.asarray(table).shape)
        for b in self.blocks:
            rows = b.rows.reshape(-1)
            best = s["best"][b.pool]  # [R, w]
            Av = np.repeat(b.Av, self.T, axis=0)
            deal = b.deal[:, best].transpose(1, 0, 2)  # [R, a, w]
            value = deal * (b.YW[best, np.arange(len(self.W))][:, None, :] - Av[:, :, None])
            weight = np.repeat(self.weight[b.deal_ids], self.T) / self.T
            grad[rows, : b.n] = weight[:, None] * (value @ self.pw)
        return grad

    def own_reach(self, table) -> np.ndarray:
        return np.ones(self.rows)

    def best_response(self, table) -> Policy:
        """The opponent that best-responds to the prior over the agent's values (a strategy of
        the real game; with the values fixed it is the exact maximiser)."""
        return _PriorMaximiser(self, self._solve(table)["prior_best"])


def _least_to_agent(opp: np.ndarray, own: np.ndarray) -> np.ndarray:
    """The payoff maximiser's demand [R, w] from opp, own [R, y, w]: among demands that tie on the
    opponent's payoff, the one that leaves the agent least (sepo's one tie rule)."""
    best = opp.max(1, keepdims=True)
    tied = opp >= best - 1e-9 * np.maximum(1.0, np.abs(best))
    return np.where(tied, -own, -np.inf).argmax(1)


class _PriorMaximiser(Policy):
    """A demand per pool, round and own value vector."""

    name = "BestResponse"
    classifier = {"stochastic": False}

    def __init__(self, solver: DealSolver, best: dict):
        self.solver, self.best = solver, best
        self.blocks = {b.pool: b for b in solver.blocks}
        self.w_index = {tuple(int(x) for x in w): i for i, w in enumerate(solver.W)}

    def demand(self, decision) -> tuple[int, ...]:
        obs = decision.observation
        pool = tuple(obs["pool"])
        if pool not in self.blocks:
            return tuple(p // 2 for p in pool)
        b = self.blocks[pool]
        return tuple(
            int(x) for x in b.A[self.best[pool][obs["round"] - 1, self.w_index[tuple(obs["values"])]]]
        )

    def action_probabilities(self, decision):
        target = self.solver.rules.encode(self.demand(decision))
        return {a: float(a == target) for a in decision.legal_actions}
