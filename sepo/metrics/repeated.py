"""Exact adversarial best responses in two-player repeated games with simultaneous moves.

An agent plays `rounds` rounds of a stage game (agent actions 0..nA-1, opponent actions
0..nO-1, stage payoffs u_A[a, o] and u_O[a, o]) against an opponent who sees the whole joint
history. The agent's behaviour is its action distribution at each joint history. Against a
fixed agent the opponent faces a finite Markov decision problem on the joint-history tree, so
backward induction gives, exactly:

    adversarial gap   G = max_σ E[Σ_t u_O − u_A] / T
    best response     B = max_σ E[Σ_t u_O] / T, and the agent's payoff against that σ

with the maximising σ as a table (history -> action) that can play as an opponent.

States. A joint history is a sequence of joint actions j = a·nO + o, oldest first. With
`memory=m` the states at round t are the last min(t, m) joint actions only: exact when the
agent's action depends on nothing but the round and its last m joint actions (memory-m tabular
policies, Tit-for-Tat with m = 1), since the opponent's best response then needs no more either.
`memory=None` is the full tree, sum_t (nA·nO)^t states.

Pruning. With `threshold > 0` (full tree only) a branch is not expanded once the agent's own
probability of reaching it falls below the threshold; its continuation is replaced by the middle
of its possible range, and the reported bound, max_σ E[Σ pruned reach × half range]/T, bounds the
error on the value (|max f − max g| <= max |f − g| at every node). The agent is then read one
round at a time, so no probability is asked for beyond the kept branches.

Gradient. `gradient[t][i, a]` = ∂G/∂π_t(a | state i) with the maximiser held fixed (Danskin):
the probability of reaching state i under (π, σ) times the value of a against σ there, over T.

Why not OpenSpiel: its best response walks a turn-based copy of the repeated game in Python,
one policy at a time (seconds per 8-round policy); this is the same recursion vectorised over
all states of a round with numpy, checked against OpenSpiel in tests/metrics/test_repeated.py.

A domain exposes its histories to table policies as `observation["history"]`: a tuple of
(own action, other action) pairs, oldest first; `HistoryTable` reads it from either seat.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from sepo.games.base import Decision
from sepo.metrics.exact import ExactResult
from sepo.policies.base import Policy

History = tuple[tuple[int, int], ...]
"""Joint actions (agent action, opponent action), oldest first."""

ProbabilityReader = Callable[[list[tuple[int, History]]], np.ndarray]
"""Given (round index t, remembered history) per state, the agent's action probabilities, [n, nA]."""


@dataclass(frozen=True)
class StageGame:
    """Stage payoffs: `agent[a, o]` to the agent and `opponent[a, o]` to the opponent."""

    agent: np.ndarray
    opponent: np.ndarray

    def __post_init__(self):
        agent, opponent = np.asarray(self.agent, float), np.asarray(self.opponent, float)
        if agent.ndim != 2 or agent.shape != opponent.shape:
            raise ValueError(f"stage payoffs must be two matrices of one shape [nA, nO]; got {agent.shape} and {opponent.shape}")
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "opponent", opponent)

    @property
    def shape(self) -> tuple[int, int]:
        return self.agent.shape


@dataclass
class Level:
    """The states of one round: remembered histories, the agent's probabilities and the index
    of each child (agent action a, opponent action o) in the next round, -1 where pruned."""

    histories: np.ndarray  # [n, L] joint actions, oldest first
    probs: np.ndarray  # [n, nA]
    children: np.ndarray  # [n, nA, nO]
    reach: np.ndarray  # [n] the agent's own probability of reaching the state (full tree only)


@dataclass
class AgentTree:
    """The agent's behaviour on every state the DP needs."""

    stage: StageGame
    rounds: int
    memory: int | None
    threshold: float
    levels: list[Level]

    @property
    def num_states(self) -> int:
        return sum(len(level.probs) for level in self.levels)


def _check(stage: StageGame, rounds: int, memory: int | None, threshold: float) -> None:
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if memory is not None and memory < 0:
        raise ValueError(f"memory must be >= 0 or None, got {memory}")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"the pruning threshold must be in [0, 1), got {threshold}")
    if threshold > 0 and memory is not None and memory < rounds:
        raise ValueError("pruning needs the full history tree (memory=None): reach is a property of histories")


def dense_histories(stage: StageGame, rounds: int, memory: int | None = None) -> list[np.ndarray]:
    """Every remembered history of rounds 0..rounds-1, as `[n_t, L_t]` arrays in base-(nA·nO) order."""
    k = stage.shape[0] * stage.shape[1]
    depth = rounds if memory is None else min(memory, rounds)
    levels, current = [], np.zeros((1, 0), dtype=np.int64)
    for _ in range(rounds):
        levels.append(current)
        if current.shape[1] < depth:
            current = np.concatenate([np.repeat(current, k, axis=0), np.tile(np.arange(k), len(current))[:, None]], axis=1)
    return levels


def _dense_children(stage: StageGame, sizes: list[int], rounds: int) -> list[np.ndarray]:
    n_a, n_o = stage.shape
    k = n_a * n_o
    children = []
    for t, n in enumerate(sizes):
        if t + 1 < rounds:
            codes = (np.arange(n)[:, None] * k + np.arange(k)[None, :]) % sizes[t + 1]  # a full memory drops its oldest joint action
            children.append(codes.reshape(n, n_a, n_o))
        else:  # the last round has no next round: a read-only view, no memory (the largest level)
            children.append(np.broadcast_to(np.int64(-1), (n, n_a, n_o)))
    return children


def as_history(row: np.ndarray, n_opponent: int) -> History:
    return tuple((int(j) // n_opponent, int(j) % n_opponent) for j in row)


def tree_from_levels(stage: StageGame, rounds: int, level_probs: Callable[[int, np.ndarray], np.ndarray],
                     memory: int | None = None) -> AgentTree:
    """The whole tree (no pruning) from a vectorised reader: `level_probs(t, histories)` gives the
    agent's probabilities `[n, nA]` at round t's remembered histories `[n, L]` (joint actions)."""
    _check(stage, rounds, memory, 0.0)
    histories = dense_histories(stage, rounds, memory)
    children = _dense_children(stage, [len(level) for level in histories], rounds)
    levels = [Level(h, _validated(level_probs(t, h), len(h), stage.shape[0]), c, np.full(len(h), np.nan))
              for t, (h, c) in enumerate(zip(histories, children))]
    return AgentTree(stage, rounds, memory, 0.0, levels)


def read_agent(stage: StageGame, rounds: int, reader: ProbabilityReader, memory: int | None = None,
               threshold: float = 0.0) -> AgentTree:
    """The agent's probabilities on the states the DP needs. Without pruning, `reader` is called
    once for every state of every round; with pruning, once per round for the kept states."""
    _check(stage, rounds, memory, threshold)
    n_a, n_o = stage.shape
    if threshold == 0.0:
        histories = dense_histories(stage, rounds, memory)
        queries = [(t, as_history(row, n_o)) for t, level in enumerate(histories) for row in level]
        probs = _validated(reader(queries), len(queries), n_a)
        sizes = [len(level) for level in histories]
        children = _dense_children(stage, sizes, rounds)
        splits = np.cumsum(sizes)[:-1]
        levels = [Level(h, p, c, np.full(len(h), np.nan)) for h, p, c in zip(histories, np.split(probs, splits), children)]
        return AgentTree(stage, rounds, memory, threshold, levels)

    levels = []
    histories, reach = np.zeros((1, 0), dtype=np.int64), np.ones(1)
    for t in range(rounds):
        probs = _validated(reader([(t, as_history(row, n_o)) for row in histories]), len(histories), n_a)
        child_reach = reach[:, None] * probs  # [n, nA]
        keep = child_reach >= threshold
        children = np.full((len(histories), n_a, n_o), -1, dtype=np.int64)
        parent, action = np.nonzero(keep)
        count = len(parent) * n_o
        if t + 1 < rounds:
            children[parent, action, :] = np.arange(count).reshape(len(parent), n_o)
        levels.append(Level(histories, probs, children, reach))
        joint = (action[:, None] * n_o + np.arange(n_o)[None, :]).reshape(-1)
        histories = np.concatenate([np.repeat(histories[parent], n_o, axis=0), joint[:, None]], axis=1)
        reach = np.repeat(child_reach[parent, action], n_o)
    return AgentTree(stage, rounds, memory, threshold, levels)


def _validated(probs, count: int, n_a: int) -> np.ndarray:
    probs = np.asarray(probs, dtype=float)
    if probs.shape != (count, n_a):
        raise ValueError(f"the agent's probabilities must have shape {(count, n_a)}, got {probs.shape}")
    if np.any(probs < -1e-12) or not np.allclose(probs.sum(1), 1.0, atol=1e-6):
        raise ValueError("the agent's probabilities must be non-negative and sum to 1 at every state")
    return np.clip(probs, 0.0, None) / probs.sum(1, keepdims=True)


@dataclass
class OpponentTable:
    """A deterministic opponent strategy: the action at each state of each round."""

    rounds: int
    memory: int | None
    n_agent: int
    n_opponent: int
    histories: list[np.ndarray]
    actions: list[np.ndarray]
    fallback: int  # played off the table (pruned branches the agent almost never reaches)
    _lookup: dict = field(default=None, repr=False)

    def action(self, t: int, history: History) -> int:
        """The table's action at round t after `history` (agent-first joint actions)."""
        if self._lookup is None:
            self._lookup = {(t, tuple(row.tolist())): int(a) for t, (rows, acts) in enumerate(zip(self.histories, self.actions))
                            for row, a in zip(rows, acts)}
        remembered = history if self.memory is None else history[len(history) - min(len(history), self.memory):]
        key = (t, tuple(a * self.n_opponent + o for a, o in remembered))
        return self._lookup.get(key, self.fallback)

    def to_json(self, agent_names: Sequence[str] | None = None, opponent_names: Sequence[str] | None = None) -> list[dict]:
        """Rows {round, history, action} in round order, with action names where given."""
        name_a = agent_names or [str(a) for a in range(self.n_agent)]
        name_o = opponent_names or [str(o) for o in range(self.n_opponent)]
        rows = []
        for t, (histories, actions) in enumerate(zip(self.histories, self.actions)):
            for row, action in zip(histories, actions):
                pairs = [f"{name_a[j // self.n_opponent]}{name_o[j % self.n_opponent]}" for j in row.tolist()]
                rows.append({"round": t + 1, "history": ",".join(pairs), "action": name_o[int(action)]})
        return rows

    def policy(self, name: str = "BestResponse", agent_names=None, opponent_names=None) -> "HistoryTable":
        return HistoryTable(self, name, agent_names, opponent_names)


class HistoryTable(Policy):
    """An opponent table that plays: it reads `observation["history"]` as (own, other) pairs,
    i.e. (opponent, agent) from the table's point of view, and the round from its length."""

    classifier = {"stochastic": False, "memory_depth": None}

    def __init__(self, table: OpponentTable, name: str = "BestResponse", agent_names: Sequence[str] | None = None,
                 opponent_names: Sequence[str] | None = None):
        self.table, self.name = table, name
        self.names = (agent_names, opponent_names)
        self.classifier = {"stochastic": False, "memory_depth": table.memory}

    def to_json(self) -> list[dict]:
        return self.table.to_json(*self.names)

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        history = tuple((other, own) for own, other in decision.observation["history"])
        chosen = self.table.action(len(history), history)
        return {a: float(a == chosen) for a in decision.legal_actions}


@dataclass
class RepeatedResult:
    """Exact values per round (totals divided by `rounds`) with the maximising opponents."""

    rounds: int
    gap: float
    gap_bound: float
    gap_agent_payoff: float
    gap_opponent_payoff: float
    br_payoff: float
    br_bound: float
    br_agent_payoff: float
    gap_table: OpponentTable
    br_table: OpponentTable
    gradient: list[np.ndarray]
    states: int
    threshold: float
    memory: int | None

    def exact_result(self, method: str, value_name: str) -> ExactResult:
        """The solver-interface view: the gap, its pruning bound and the method that found it."""
        return ExactResult(
            value=self.gap, value_name=value_name, br_payoff=self.br_payoff, agent_payoff=self.br_agent_payoff,
            method=method + (f", branches below agent reach {self.threshold:g} pruned" if self.threshold else ""),
            exact=self.gap_bound == 0.0, pruning_bound=self.gap_bound,
            extra={"br_pruning_bound": self.br_bound, "agent_payoff_vs_gap_maximiser": self.gap_agent_payoff,
                   "opponent_payoff_vs_gap_maximiser": self.gap_opponent_payoff, "states": self.states})

    def summary(self) -> dict:
        return {"adversarial_gap": self.gap, "pruning_bound": self.gap_bound, "br_payoff": self.br_payoff,
                "br_pruning_bound": self.br_bound, "agent_payoff_vs_br": self.br_agent_payoff,
                "agent_payoff_vs_gap_maximiser": self.gap_agent_payoff,
                "opponent_payoff_vs_gap_maximiser": self.gap_opponent_payoff,
                "states": self.states, "threshold": self.threshold, "memory": self.memory, "rounds": self.rounds}


def _expect(probs: np.ndarray, reward: np.ndarray, continuation) -> np.ndarray:
    """Σ_a probs[n, a] · (reward[a, o] + continuation[n, a, o]) -> [n, o]; a loop over the few
    agent actions is several times faster than numpy's reduction over a short middle axis."""
    total = 0.0
    for a in range(probs.shape[1]):
        after = reward[a][None] if np.isscalar(continuation) else reward[a][None] + continuation[:, a]
        total = total + probs[:, a, None] * after
    return total


def _backward(tree: AgentTree, reward: np.ndarray, tie_break: np.ndarray | None = None):
    """Backward induction for max_σ E[Σ reward]. Returns the chosen action per state, the value
    of each state and the pruning bound per state (lists over rounds)."""
    rounds = tree.rounds
    low, high = float(reward.min()), float(reward.max())
    half = 0.5 * (high - low)
    pruning = tree.threshold > 0
    value_next, bound_next, second_next = np.zeros(1), np.zeros(1), np.zeros(1)
    choices, values, bounds = [None] * rounds, [None] * rounds, [None] * rounds
    for t in range(rounds - 1, -1, -1):
        level = tree.levels[t]
        remaining = rounds - t - 1
        if remaining == 0:
            continuation = second_continuation = 0.0
        elif pruning:
            pruned = level.children < 0
            index = np.where(pruned, 0, level.children)
            continuation = np.where(pruned, 0.5 * (low + high) * remaining, value_next[index])
            second_continuation = None if tie_break is None else np.where(pruned, 0.0, second_next[index])
        else:
            continuation = value_next[level.children]
            second_continuation = None if tie_break is None else second_next[level.children]
        q = _expect(level.probs, reward, continuation)
        if tie_break is None:
            choice = q.argmax(1)
        else:
            second = _expect(level.probs, tie_break, second_continuation)
            best = q.max(1, keepdims=True)
            choice = np.where(q >= best - 1e-9 * max(1.0, high - low) * max(remaining + 1, 1), second, -np.inf).argmax(1)
            second_next = np.take_along_axis(second, choice[:, None], 1)[:, 0]
        value_next = np.take_along_axis(q, choice[:, None], 1)[:, 0]
        if pruning and remaining > 0:
            error = _expect(level.probs, np.zeros_like(reward), np.where(pruned, half * remaining, bound_next[index]))
            bound_next = error.max(1)
        else:
            bound_next = np.zeros(len(q))
        choices[t], values[t], bounds[t] = choice, value_next, bound_next
    return choices, values, bounds


def _follow(tree: AgentTree, choices: list[np.ndarray], payoff: np.ndarray, reaches: list[np.ndarray] | None = None) -> float:
    """Expected Σ payoff when the opponent plays `choices` (pruned branches count only their round)."""
    reaches = _reaches(tree, choices) if reaches is None else reaches
    total = 0.0
    for reach, level, choice in zip(reaches, tree.levels, choices):
        for a in range(level.probs.shape[1]):
            total += float((reach * level.probs[:, a] * payoff[a][choice]).sum())
    return total


def _reaches(tree: AgentTree, choices: list[np.ndarray]) -> list[np.ndarray]:
    reach, out = np.ones(1), []
    for t, level in enumerate(tree.levels):
        out.append(reach)
        if t + 1 < tree.rounds:
            rows = np.arange(len(level.probs))
            child = level.children[rows, :, choices[t]]
            ok = child >= 0
            weight = reach[:, None] * level.probs
            reach = np.bincount(child[ok], weights=weight[ok], minlength=len(tree.levels[t + 1].probs))
    return out


def solve(tree: AgentTree) -> RepeatedResult:
    """Adversarial gap, best-response payoff, both maximisers, pruning bounds and ∂G/∂π."""
    stage, rounds = tree.stage, tree.rounds
    gap_reward = stage.opponent - stage.agent
    gap_choice, gap_values, gap_bounds = _backward(tree, gap_reward)
    # among payoff-maximising opponents, the one that leaves the agent least: a stated tie-break
    br_choice, br_values, br_bounds = _backward(tree, stage.opponent, tie_break=-stage.agent)

    gradient, reaches = [], _reaches(tree, gap_choice)
    br_reaches = _reaches(tree, br_choice)
    for t, level in enumerate(tree.levels):
        rows = np.arange(len(level.probs))
        next_values = gap_values[t + 1] if t + 1 < rounds else np.zeros(1)
        child = level.children[rows, :, gap_choice[t]]
        remaining = rounds - t - 1
        middle = 0.5 * (gap_reward.min() + gap_reward.max()) * remaining
        continuation = np.where(child >= 0, next_values[np.maximum(child, 0)], middle)
        action_value = gap_reward[:, gap_choice[t]].T + continuation  # [n, nA]
        gradient.append(reaches[t][:, None] * action_value / rounds)

    n_a, n_o = stage.shape
    fallback_gap = int(gap_reward.mean(0).argmax())
    fallback_br = int(stage.opponent.mean(0).argmax())
    histories = [level.histories for level in tree.levels]
    return RepeatedResult(
        rounds=rounds,
        gap=float(gap_values[0][0]) / rounds,
        gap_bound=float(gap_bounds[0][0]) / rounds,
        gap_agent_payoff=_follow(tree, gap_choice, stage.agent, reaches) / rounds,
        gap_opponent_payoff=_follow(tree, gap_choice, stage.opponent, reaches) / rounds,
        br_payoff=float(br_values[0][0]) / rounds,
        br_bound=float(br_bounds[0][0]) / rounds,
        br_agent_payoff=_follow(tree, br_choice, stage.agent, br_reaches) / rounds,
        gap_table=OpponentTable(rounds, tree.memory, n_a, n_o, histories, gap_choice, fallback_gap),
        br_table=OpponentTable(rounds, tree.memory, n_a, n_o, histories, br_choice, fallback_br),
        gradient=gradient,
        states=tree.num_states,
        threshold=tree.threshold,
        memory=tree.memory,
    )


def gap_value(tree: AgentTree) -> float:
    """The adversarial gap alone (one backward pass): for benchmarks and line searches."""
    _, values, _ = _backward(tree, tree.stage.opponent - tree.stage.agent)
    return float(values[0][0]) / tree.rounds


def play_value(tree: AgentTree, table: OpponentTable, payoff: np.ndarray) -> float:
    """Expected Σ payoff / T of the agent's tree against a fixed opponent table on the same states."""
    return _follow(tree, table.actions, np.asarray(payoff, float)) / tree.rounds
