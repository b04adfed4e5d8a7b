"""The pricing market (two firms) as a training environment for the exact tabular SEPO trainer.

The agent is a table over the game's information states (the last `memory` periods: 226 keys
with the default memory 1 and 15 prices). A group shares its rival, drawn uniformly from the train
pool plus one more entry, the exact gap maximiser of the current policy (and, when λc or λx is
charged, the collusive partners and exploiters evaluation counts them against, `sepo.games.credit`);
a rollout is one whole market (return from the start, per period). As in the other repeated
games, each rollout's utility, collusion and externality are scaled by its rival's credit for that
term, so the expected update is that of s·u − λe·s·e − λc·c − λx·x with u against the train pool,
c (max(0, Δ) per period) against the collusive pool and x (the consumers' surplus loss share)
against the train and exploiter pools, the maximiser among them under rigorous
(`events.round_events`: the definitions evaluation uses), while the maximiser reaches every state
the gap's gradient charges.

Every rival is a finite-state machine (`bots.Machine`; the maximiser's play depends on the period
and the agent's key), so everything expected is computed exactly by forward passes over (period,
agent state, rival state): the training reach ρ(I) (expected visits per market), the utility, and
the collusion index, consumer surplus and externality against each pool, reported by
`exact_metrics` (the numbers docs/pricing.md quotes for trained agents).

Advantage Alignment (`rollouts(..., advantages=True)`): each period's exact advantages of the joint
prices for the agent and the rival, A^i_t = r^i(a_t, b_t) + V^i(h_{t+1}, s_{t+1}) − V^i(h_t, s_t),
V^i each firm's expected profit to go at (period, agent state, rival state) by backward induction
(`joint_values`), in profit units of the market's return.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.credit import Charges, credited_rollouts, training_mixture
from sepo.games.pricing.bots import Machine, PriceSpec, PricingBot
from sepo.games.pricing.events import round_events
from sepo.games.pricing.exact import PricingSolver, key_rows
from sepo.games.records import Rollouts, match_groups
from sepo.metrics.repeated import RepeatedResult, dense_histories

PAYOFF, COLLUSION, EXTERNALITY, DELTA, SURPLUS = range(5)


def sample(probs: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """One action per row of `probs` by inverse CDF on `uniforms`."""
    cumulative = np.cumsum(probs, axis=1)
    return np.minimum((uniforms[:, None] * cumulative[:, -1:] >= cumulative).sum(1), probs.shape[1] - 1)


class Rival:
    """A rival as the environment plays it: a machine, or (the maximiser) per-period action tables
    over the agent's states."""

    def __init__(
        self, label: str, machine: Machine | None = None, actions: list[np.ndarray] | None = None, k: int = 0
    ):
        self.label, self.machine, self.actions, self.k = label, machine, actions, k
        self.states = 1 if machine is None else machine.states
        self.next = np.zeros((1, k, k), dtype=np.int64) if machine is None else machine.next

    def probs(self, t: int, h: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Price probabilities `[len(h), K]` at agent states `h` (level indices) and rival states `s`."""
        if self.machine is None:
            return np.eye(self.k)[self.actions[t][h]]
        return self.machine.probs[s]

    def level(self, t: int, size: int) -> np.ndarray:
        """`[H, S, K]`: the probabilities at every (agent state, rival state) of period t."""
        if self.machine is None:
            return np.eye(self.k)[self.actions[t]][:, None, :]
        return np.broadcast_to(self.machine.probs[None], (size, *self.machine.probs.shape))


class PricingTrainingEnvironment:
    joint_advantages = True

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        if game.num_players != 2:
            raise SepoError(
                f"the pricing trainers are for two firms (the exact solver's); got --firms {game.num_players}"
            )
        self.game = game
        self.solver = PricingSolver(game)
        self.keys = self.solver.keys
        self.k = k = game.k
        self.legal = np.ones((len(self.keys), k), dtype=bool)
        self.scale = game.payoff_scale
        spec = PriceSpec.of_game(game, 1)
        self.rivals = [self._rival(s, game, spec) for s in train_specs]
        if not self.rivals:
            raise SepoError("the pricing trainers need a train pool")
        self.collusive_rivals = [self._rival(s, game, spec) for s in collusive_specs]
        self.mixture = training_mixture(train_specs, collusive_specs, exploiter_specs, charges=charges,
                                        best_response_counts=game.protocol == "rigorous")
        self.extra = [self._rival(s, game, spec) for s in self.mixture.extra]
        stage = game.stage_matrices(0)
        collusion, externality = round_events(stage["delta"], stage["surplus_loss"])
        consumer = game.market.consumer_surplus(game.joint_prices())
        # [5, K, K]
        self.quantities = np.stack([stage["agent"], collusion, externality, stage["delta"], consumer])
        histories = dense_histories(self.solver.stage, game.rounds, game.memory)
        self._levels = []
        for t, h in enumerate(histories):
            rows = key_rows(h // k, h % k, game.memory, k)
            children = (
                (np.arange(len(h))[:, None] * k * k + np.arange(k * k)[None, :]) % len(histories[t + 1])
                if t + 1 < game.rounds
                else None
            )
            self._levels.append((rows, children))
        self._offsets = [int(rows[0]) for rows, _ in self._levels]
        # a rollout's utility credit: train bots, the maximiser, then the others
        self.weight = self.mixture.utility
        self._forwards: tuple[bytes, dict] = (b"", {})
        self._values: tuple[bytes, list] | None = None

    @staticmethod
    def _rival(spec, game, price_spec) -> Rival:
        bot = spec.build(game)
        if not isinstance(bot, PricingBot):
            raise SepoError(f"the pricing trainers play the domain's bots only; {spec.label!r} is not one")
        return Rival(spec.label, bot.machine(price_spec), k=game.k)

    def solved(self, table: np.ndarray) -> RepeatedResult:
        """The exact solution at `table` (the solver keeps the latest one for the step's several uses)."""
        return self.solver.solve_table(table)

    def rollout_rivals(self, table: np.ndarray) -> list[Rival]:
        """The rivals a rollout is drawn from, uniformly: the train bots, the gap maximiser, then the
        rivals of charged terms."""
        return [
            *self.rivals,
            Rival("BestResponse", actions=self.solved(table).gap_table.actions, k=self.k),
            *self.extra,
        ]

    # -- exact expectations ------------------------------------------------------------------------
    def forward(self, table: np.ndarray, rival: Rival) -> tuple[np.ndarray, np.ndarray]:
        """Expected visits per key per market, and the expected `quantities` per period, against
        `rival` (kept for the latest table: a step's exact metrics are the next step's reach)."""
        table = np.asarray(table, dtype=float)
        if self._forwards[0] != table.tobytes():
            self._forwards = (table.tobytes(), {})
        found = self._forwards[1]
        if rival.label not in found:
            found[rival.label] = self._forward(table, rival)
        return found[rival.label]

    def _forward(self, table: np.ndarray, rival: Rival) -> tuple[np.ndarray, np.ndarray]:
        """One forward pass over the (agent state, rival state) pairs reached with positive probability."""
        k, n_s = self.k, rival.states
        flat = self.quantities.reshape(len(self.quantities), -1).T  # [K², 5]
        following = rival.next.transpose(0, 2, 1)  # [s, agent action, rival action]
        reach = np.zeros((1, n_s))
        reach[0, 0] = 1.0
        visits, totals = np.zeros(len(self.keys)), np.zeros(len(self.quantities))
        for t, (rows, children) in enumerate(self._levels):
            h, s = np.nonzero(reach)
            weight = reach[h, s]
            np.add.at(visits, rows[h], weight)
            # [P, a, b]
            joint = weight[:, None, None] * table[rows[h]][:, :, None] * rival.probs(t, h, s)[:, None, :]
            totals += joint.reshape(-1, k * k).sum(0) @ flat
            if children is not None:
                size = len(self._levels[t + 1][0])
                index = children[h].reshape(len(h), k, k) * n_s + following[s]
                reach = np.bincount(
                    index.reshape(-1), weights=joint.reshape(-1), minlength=size * n_s
                ).reshape(size, n_s)
        return visits, totals / self.game.rounds

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        """ρ(I): expected visits per rollout, the rival uniform over the rollout rivals."""
        table = np.asarray(table, dtype=float)
        return np.mean([self.forward(table, rival)[0] for rival in self.rollout_rivals(table)], axis=0)

    # -- sampled markets ---------------------------------------------------------------------------
    def play(self, table: np.ndarray, rivals: list[Rival], rival_of: np.ndarray, uniforms: np.ndarray):
        """Play `len(rival_of)` markets: (own actions, rival actions, key rows), each `[n, T]`."""
        n, rounds, k = len(rival_of), self.game.rounds, self.k
        own = np.zeros((n, rounds), dtype=np.int64)
        other = np.zeros((n, rounds), dtype=np.int64)
        rows = np.zeros((n, rounds), dtype=np.int64)
        state = np.zeros(n, dtype=np.int64)
        for t in range(rounds):
            rows[:, t] = key_rows(own[:, :t], other[:, :t], self.game.memory, k)
            rival_probs = np.empty((n, k))
            for index, rival in enumerate(rivals):
                mine = rival_of == index
                if mine.any():
                    rival_probs[mine] = rival.probs(t, rows[mine, t] - self._offsets[t], state[mine])
            own[:, t] = sample(table[rows[:, t]], uniforms[:, t, 0])
            other[:, t] = sample(rival_probs, uniforms[:, t, 1])
            for index, rival in enumerate(rivals):
                mine = rival_of == index
                state[mine] = rival.next[state[mine], other[mine, t], own[mine, t]]
        return own, other, rows

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator,
                 advantages: bool = False) -> Rollouts:
        table = np.asarray(table, dtype=float)
        # index n: the gap maximiser
        group_of, rival_of = match_groups(rng, groups, group_size, self.mixture.size)
        own, other, rows = self.play(table, self.rollout_rivals(table), rival_of,
                                     rng.random((len(group_of), self.game.rounds, 2)))
        per_period = self.quantities[:, own, other].mean(-1)  # [5, n]
        joint = self.match_advantages(table, own, other, rival_of) if advantages else None
        return credited_rollouts(rows, own, group_of, rival_of, self.mixture, per_period[PAYOFF],
                                 per_period[COLLUSION], per_period[EXTERNALITY], joint)

    def joint_values(self, table: np.ndarray) -> list[list[np.ndarray]]:
        """Per rollout rival, per period t = 0..T: `[H, S, 2]` the agent's and the rival's expected
        profit to go at agent state h and rival state s (kept for the step's calls)."""
        table = np.asarray(table, dtype=float)
        if self._values is None or self._values[0] != table.tobytes():
            k = self.k
            stage = self.game.stage_matrices(0)
            stages = np.stack([stage["agent"], stage["rival"]], axis=-1)  # [a, b, 2]
            per_rival = []
            for rival in self.rollout_rivals(table):
                following = rival.next.transpose(0, 2, 1)  # [s, a, b]
                values, later = [None] * len(self._levels) + [None], None
                for t in reversed(range(len(self._levels))):
                    rows, children = self._levels[t]
                    after = np.broadcast_to(stages, (len(rows), rival.states, k, k, 2))
                    if later is not None:
                        after = after + later[children.reshape(len(rows), 1, k, k), following[None]]
                    values[t] = later = np.einsum(
                        "ha,hsb,hsabq->hsq", table[rows], rival.level(t, len(rows)), after
                    )
                per_rival.append(values)
            self._values = (table.tobytes(), per_rival)
        return self._values[1]

    def match_advantages(
        self, table: np.ndarray, own: np.ndarray, other: np.ndarray, rival_of: np.ndarray
    ) -> np.ndarray:
        """`[markets, T, 2]`: the agent's and the rival's advantage of each period's joint prices,
        r^i + V^i(h_{t+1}, s_{t+1}) − V^i(h_t, s_t), in profit units, uncredited."""
        table = np.asarray(table, dtype=float)
        rivals, values = self.rollout_rivals(table), self.joint_values(table)
        stage = self.game.stage_matrices(0)
        stages = np.stack([stage["agent"], stage["rival"]], axis=-1)
        rounds = own.shape[1]
        rows = np.stack([key_rows(own[:, :t], other[:, :t], self.game.memory, self.k) - self._offsets[t]
                         for t in range(rounds)], axis=1)
        out = np.zeros((*own.shape, 2))
        for index, rival in enumerate(rivals):
            mine = np.nonzero(rival_of == index)[0]
            state = np.zeros(len(mine), dtype=np.int64)
            for t in range(rounds):
                a, b = own[mine, t], other[mine, t]
                after = rival.next[state, b, a]
                following = values[index][t + 1][rows[mine, t + 1], after] if t + 1 < rounds else 0.0
                out[mine, t] = stages[a, b] + following - values[index][t][rows[mine, t], state]
                state = after
        return out

    def exact_metrics(self, table: np.ndarray) -> dict:
        """Exact utility against the train pool, the solver's value, and the market's numbers:
        collusion (mean max(0, Δ)), raw Δ and consumer surplus per period against the collusive pool,
        externality and consumer surplus against the train pool."""
        table = np.asarray(table, dtype=float)
        result = self.solver.evaluate(table)
        train = np.mean([self.forward(table, rival)[1] for rival in self.rivals], axis=0)
        out = {
            "utility": float(train[PAYOFF]),
            result.value_name: result.value,
            "br_payoff": result.br_payoff,
            "externality": float(train[EXTERNALITY]),
            "consumer_surplus_train": float(train[SURPLUS]),
            "delta_train": float(train[DELTA]),
        }
        if self.collusive_rivals:
            partners = np.mean([self.forward(table, rival)[1] for rival in self.collusive_rivals], axis=0)
            out.update({"collusion": float(partners[COLLUSION]), "delta_collusive": float(partners[DELTA]),
                        "consumer_surplus_collusive": float(partners[SURPLUS])})
        return out
