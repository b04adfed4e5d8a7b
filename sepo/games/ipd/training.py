"""The IPD as a training environment for the exact tabular SEPO trainer.

The agent is a table over the game's information states (`--memory n`: the last n rounds, e.g.
21 keys for memory 2). The train pool holds the domain's bots and any Axelrod strategy whose
action distribution can be read exactly (`axelrod_bots.ExactAxelrodBot`; others are refused).
A group shares its opponent, drawn uniformly from the train pool plus one more entry, the exact
gap maximiser of the current policy; a rollout is one whole match (return from the start, per
round). Why the maximiser: the attribution charges a key only where rollouts reach it, and a pool
of deterministic bots leaves most keys unreached (TFT and GrimTrigger at 3 rounds reach 7 of 21
memory-2 keys), keys where the maximiser may take its gains; without it the expected update
missed their part of ∇e (off by 0.347 in that case). Every key with a nonzero Danskin gradient is
reached by the maximiser, so the charge is unbiased for any pool. When λc or λx is charged, the
collusive partners and the exploiters that evaluation counts them against join the draw
(`sepo.games.credit`). As in the paper's per-pool credit, each rollout's utility, collusion and
externality are scaled by its opponent's credit for that term, so the expected update is that of
s·u − λe·s·e − λc·c − λx·x with u against the train pool, c (the DEFECT rate) against the
collusive pool and x (the per-round welfare shortfall, `events.py`) against the train and
exploiter pools, the maximiser among them under the rigorous protocol: evaluation's numbers. The
training reach ρ(I) is the expected number of visits to key I per training match under that
mixture, computed exactly over the joint-history tree, so the per-rollout charge (g − Σπg)/ρ
makes E[E_r ∇log P(r)] the exact gradient of the gap.

Self-play (`use_self_play`): the train bots' place in the rollouts is taken by the agent's own
current table in the other seat (`SelfBot`, held fixed within a step, each seat's own policy
gradient; the IPD is symmetric, so the update from seat 0 is the one from seat 1), credited 2 so
the mixture with the maximiser still ascends u against it; exact metrics still report utility
against the train pool (and `self_play_utility`).

Advantage Alignment (`rollouts(..., advantages=True)`): each decision's exact advantages of the
joint action for the agent and the opponent, A^i_t = r^i(a_t, b_t) + V^i(h_{t+1}) − V^i(h_t), V^i
each side's expected payoff to go under the agent's table and that opponent (`joint_values`,
backward induction over the full-history tree), in payoff units of the match's return.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.credit import Charges, credited_rollouts, training_mixture
from sepo.games.ipd.axelrod_bots import AxelrodPlayer, ExactAxelrodBot
from sepo.games.ipd.bots import IPDBot
from sepo.games.ipd.events import game_reward, round_events
from sepo.games.ipd.exact import IPDSolver
from sepo.games.ipd.rollouts import key_rows, play_matches
from sepo.games.records import Rollouts, match_groups
from sepo.metrics.repeated import dense_histories


def vectorised(spec, game) -> IPDBot:
    """The train-pool entry `spec` as a vectorised bot (an Axelrod strategy read exactly by replay)."""
    bot = spec.build(game)
    if isinstance(bot, AxelrodPlayer):
        return ExactAxelrodBot(bot, game)
    if not isinstance(bot, IPDBot):
        raise SepoError(
            f"the IPD trainers play the domain's bots and Axelrod strategies only; {spec.label!r} is neither"
        )
    return bot


class IPDTrainingEnvironment:
    joint_advantages = True
    # the training reach is computed over every whole history (sized by sepo.training.sizes)
    full_history_tree = True

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.solver = IPDSolver(game)
        self.keys = self.solver.keys
        self.legal = np.ones((len(self.keys), 2), dtype=bool)
        self.scale = game.payoff_scale
        self.opponents = [vectorised(spec, game) for spec in train_specs]
        if not self.opponents:
            raise SepoError("the IPD trainers need a train pool")
        self._pools = (list(train_specs), list(collusive_specs), list(exploiter_specs), charges)
        self.self_play = False
        self.reward = game_reward(game)
        self._mix(False)
        self._solved: tuple[bytes, MaximiserBot] | None = None
        self._values: tuple[bytes, list[np.ndarray]] | None = None

    def _mix(self, self_play: bool) -> None:
        """The rollout opponents' mixture and credits (`sepo.games.credit`), their bots and the tree."""
        train, collusive, exploiters, charges = self._pools
        self.mixture = training_mixture(train, collusive, exploiters, charges=charges, self_play=self_play,
                                        best_response_counts=self.game.protocol == "rigorous")
        # a rollout's utility credit: partners, the maximiser, then the others
        self.weight = self.mixture.utility
        self.extra = [vectorised(spec, self.game) for spec in self.mixture.extra]
        self._levels, self._swapped, self._extra_levels = self._tree()

    def use_self_play(self) -> None:
        """Rollouts against the agent's own table (seat-swapped) and the gap maximiser (module doc)."""
        self.self_play = True
        self._mix(True)

    def _tree(self):
        """Per round: the full histories (own, other), the agent's key rows, each train bot's P(C),
        the opponent's own key, and each further rollout opponent's P(C)."""
        levels, swapped, extra = [], [], []
        for history in dense_histories(self.solver.stage, self.game.rounds, None):
            own, other = history // 2, history % 2
            rows = key_rows(own, other, self.game.memory)
            coop = np.stack([bot.cooperate_probability(other, own) for bot in self.opponents])  # [bots, n]
            levels.append((rows, coop))
            swapped.append(key_rows(other, own, self.game.memory))  # the opponent's own key at each history
            extra.append(np.stack([bot.cooperate_probability(other, own) for bot in self.extra]) if self.extra
                         else np.zeros((0, len(rows))))
        return levels, swapped, extra

    def maximiser(self, table: np.ndarray) -> "MaximiserBot":
        """The exact gap maximiser of `table` as a vectorised bot (kept for the step's several uses)."""
        table = np.asarray(table, dtype=float)
        if self._solved is None or self._solved[0] != table.tobytes():
            self._solved = (table.tobytes(), MaximiserBot(self.solver.solve_table(table).gap_table))
        return self._solved[1]

    def events(self, own: np.ndarray, payoff: np.ndarray):
        """Per round (moves `own`, payoffs `[..., (agent, opponent)]`): (collusion event, externality
        event) under the game's protocol, `events.round_events`."""
        return round_events(self.game.protocol, own, payoff[..., 0], payoff[..., 1], self.reward)

    def rollout_opponents(self, table: np.ndarray) -> list:
        """The opponents a rollout is drawn from, uniformly: the train bots (under self-play, the
        agent's table), the maximiser, then the further opponents of charged terms."""
        partners = [SelfBot(table, self.game.memory)] if self.self_play else self.opponents
        return [*partners, self.maximiser(table), *self.extra]

    def cooperation(self, table: np.ndarray) -> list[np.ndarray]:
        """Per round, each rollout opponent's P(C) at every full history: `[opponents, histories]`."""
        maximiser = self.maximiser(table)
        return [
            np.concatenate(
                [
                    table[swapped, 0][None] if self.self_play else coop,
                    maximiser.at_full_histories(t, len(rows))[None],
                    extra,
                ]
            )
            for t, ((rows, coop), swapped, extra) in enumerate(
                zip(self._levels, self._swapped, self._extra_levels)
            )
        ]

    def _forward(self, table: np.ndarray, cooperation: list[np.ndarray] | None = None):
        """Expected visits per key per match, averaged over the opponents (default: the rollout
        opponents; else `cooperation`, each one's P(C) per round and history), and each
        opponent's expected payoff per round."""
        if cooperation is None:
            cooperation = self.cooperation(table)
        count = len(cooperation[0])
        visits = np.zeros(len(self.keys))
        payoff = np.zeros(count)
        reach = np.ones((count, 1))
        matrix = self.game.payoffs.matrix[:, :, 0]
        for (rows, _), coop in zip(self._levels, cooperation):
            np.add.at(visits, rows, reach.mean(0))
            agent = table[rows]  # [n, 2]
            opponent = np.stack([coop, 1.0 - coop], axis=-1)  # [opponents, n, 2]
            # [o, n, a, b]
            joint = reach[:, :, None, None] * agent[None, :, :, None] * opponent[:, :, None, :]
            payoff += (joint * matrix).sum((1, 2, 3))
            reach = joint.reshape(count, -1)
        return visits, payoff / self.game.rounds

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self._forward(np.asarray(table, dtype=float))[0]

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator,
                 advantages: bool = False) -> Rollouts:
        table = np.asarray(table, dtype=float)
        # index n: the gap maximiser
        group_of, opponent_of = match_groups(rng, groups, group_size, self.mixture.size)
        matches = play_matches(
            table,
            self.rollout_opponents(table),
            opponent_of,
            self.game.rounds,
            self.game.payoffs.matrix,
            rng.random((len(group_of), self.game.rounds, 2)),
            self.game.memory,
        )
        defections, externality = self.events(matches.own, matches.payoff)
        joint = self.match_advantages(table, matches.own, matches.other, opponent_of) if advantages else None
        return credited_rollouts(
            matches.rows,
            matches.own,
            group_of,
            opponent_of,
            self.mixture,
            matches.payoff[:, :, 0].mean(1),
            defections.mean(1),
            externality.mean(1),
            joint,
        )

    def joint_values(self, table: np.ndarray) -> list[np.ndarray]:
        """Per round t = 0..T, `values[t][o, h, i]`: side i's (agent, opponent) expected payoff to go
        from full history h of round t against rollout opponent o (kept for the step's calls)."""
        table = np.asarray(table, dtype=float)
        if self._values is None or self._values[0] != table.tobytes():
            matrix = self.game.payoffs.matrix  # [own, other, (agent, opponent)]
            cooperation = self.cooperation(table)
            count = len(cooperation[0])
            values = [None] * self.game.rounds + [np.zeros((count, 4 ** self.game.rounds, 2))]
            for t in reversed(range(self.game.rounds)):
                rows = self._levels[t][0]
                opponent = np.stack([cooperation[t], 1.0 - cooperation[t]], axis=-1)  # [o, h, b]
                # child 4h + 2a + b
                after = matrix[None, None] + values[t + 1].reshape(count, len(rows), 2, 2, 2)
                values[t] = np.einsum("ha,ohb,ohabi->ohi", table[rows], opponent, after)
            self._values = (table.tobytes(), values)
        return self._values[1]

    def match_advantages(
        self, table: np.ndarray, own: np.ndarray, other: np.ndarray, opponent_of: np.ndarray
    ) -> np.ndarray:
        """`[matches, T, 2]`: the agent's and the opponent's advantage of each round's joint move,
        r^i + V^i(h_{t+1}) − V^i(h_t), in payoff units, uncredited."""
        values = self.joint_values(table)
        matrix = self.game.payoffs.matrix
        code = np.zeros(len(opponent_of), dtype=np.int64)
        out = np.zeros((*own.shape, 2))
        for t in range(own.shape[1]):
            child = 4 * code + 2 * own[:, t] + other[:, t]
            out[:, t] = (
                matrix[own[:, t], other[:, t]]
                + values[t + 1][opponent_of, child]
                - values[t][opponent_of, code]
            )
            code = child
        return out

    def exact_metrics(self, table: np.ndarray) -> dict:
        table = np.asarray(table, dtype=float)
        result = self.solver.evaluate(table)
        train = [coop for _, coop in self._levels]
        metrics = {"utility": float(self._forward(table, train)[1].mean()), result.value_name: result.value,
                   "br_payoff": result.br_payoff}
        if self.self_play:
            metrics["self_play_utility"] = float(self._forward(table)[1][0])
        return metrics


class MaximiserBot(IPDBot):
    """The gap maximiser's table (`RepeatedResult.gap_table`) as a vectorised bot: its move at each
    (round, last m rounds) state of the solver, m the game's memory."""

    name = "BestResponse"
    classifier = {"memory_depth": None, "stochastic": False}

    def __init__(self, gap_table):
        self.table = gap_table

    def _moves(self, t: int, codes: np.ndarray) -> np.ndarray:
        """Its move at round t after full histories given as base-4 codes of (agent, it) joint moves."""
        memory = self.table.memory
        size = 4 ** (t if memory is None else min(t, memory))
        return self.table.actions[t][codes % size]

    def at_full_histories(self, t: int, count: int) -> np.ndarray:
        """P(C) at round t's full histories in `dense_histories` order (their index is their code)."""
        return (self._moves(t, np.arange(count)) == 0).astype(float)

    def cooperate_probability(self, own: np.ndarray, other: np.ndarray) -> np.ndarray:
        codes = np.zeros(own.shape[0], dtype=np.int64)
        for column in range(own.shape[1]):
            codes = codes * 4 + 2 * other[:, column] + own[:, column]  # the agent's move first
        return (self._moves(own.shape[1], codes) == 0).astype(float)


class SelfBot(IPDBot):
    """The agent's own table in the other seat (self-play): P(C) at the bot's own key of each history."""

    name = "Self"
    classifier = {"memory_depth": None, "stochastic": True}

    def __init__(self, table: np.ndarray, memory: int | None):
        self.table, self.memory = np.asarray(table, dtype=float), memory

    def cooperate_probability(self, own: np.ndarray, other: np.ndarray) -> np.ndarray:
        return self.table[key_rows(own, other, self.memory), 0]
