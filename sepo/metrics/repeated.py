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

Agent states. An agent that declares a small state its play depends on besides the round
(`declared_state`: a finite Axelrod `memory_depth` d, whose state is the last d joint actions, or
its own `play_state(history)`, e.g. Grim Trigger's "has the other ever defected") is solved
exactly on (round, that state) instead (`state_tree`): the opponent's best continuation depends on
nothing else, so the DP has as many states per round as the agent has states, whatever the
number of rounds (GrimTrigger: 2; TFT: 4 joint actions). Each state is read at one history that
reaches it with positive probability (the agent's own zero-probability moves are not expanded).

Size. The joint-history tree has sum_t (nA·nO)^t states; `check_tree_fits` estimates its memory
before anything is built and refuses in one line (naming the game's `--memory` and the pruning
`--threshold`) when it would not fit in the memory this machine has free.

Gradient. `gradient[t][i, a]` = ∂G/∂π_t(a | state i) with the maximiser held fixed (Danskin):
the probability of reaching state i under (π, σ) times the value of a against σ there, over T.

Why not OpenSpiel: its best response walks a turn-based copy of the repeated game in Python,
one policy at a time (seconds per 8-round policy); this is the same recursion vectorised over
all states of a round with numpy, checked against OpenSpiel in tests/metrics/test_repeated.py.

A domain exposes its histories to table policies as `observation["history"]`: a tuple of
(own action, other action) pairs, oldest first; `HistoryTable` reads it from either seat.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.limits import count_text, memory_budget, size_text, tree_node_bytes
from sepo.metrics.exact import ExactResult
from sepo.policies.base import Policy

History = tuple[tuple[int, int], ...]
"""Joint actions (agent action, opponent action), oldest first."""

StateOf = Callable[[History], Hashable]
"""An agent's declared state after a history (agent-first joint actions): its play at round t
depends only on t and this state, and the state after `h + (a, o)` only on the state after `h`
and (a, o)."""

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
            raise ValueError(
                f"stage payoffs must be two matrices of one shape [nA, nO]; got {agent.shape} and "
                f"{opponent.shape}"
            )
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
    # the agent's declared state at each node ((round, state) trees; histories then empty)
    states: list | None = None


@dataclass
class AgentTree:
    """The agent's behaviour on every state the DP needs."""

    stage: StageGame
    rounds: int
    memory: int | None
    threshold: float
    levels: list[Level]
    state_of: StateOf | None = None  # set when the levels are (round, declared state) nodes

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
        raise ValueError(
            "pruning needs the full history tree (memory=None): reach is a property of histories"
        )


def dense_histories(stage: StageGame, rounds: int, memory: int | None = None) -> list[np.ndarray]:
    """Every remembered history of rounds 0..rounds-1, as `[n_t, L_t]` arrays in base-(nA·nO) order."""
    k = stage.shape[0] * stage.shape[1]
    depth = rounds if memory is None else min(memory, rounds)
    levels, current = [], np.zeros((1, 0), dtype=np.int64)
    for _ in range(rounds):
        levels.append(current)
        if current.shape[1] < depth:
            current = np.concatenate(
                [np.repeat(current, k, axis=0), np.tile(np.arange(k), len(current))[:, None]], axis=1
            )
    return levels


def _dense_children(stage: StageGame, sizes: list[int], rounds: int) -> list[np.ndarray]:
    n_a, n_o = stage.shape
    k = n_a * n_o
    children = []
    for t, n in enumerate(sizes):
        if t + 1 < rounds:
            # a full memory drops its oldest joint action
            codes = (np.arange(n)[:, None] * k + np.arange(k)[None, :]) % sizes[t + 1]
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
        levels = [
            Level(h, p, c, np.full(len(h), np.nan))
            for h, p, c in zip(histories, np.split(probs, splits), children)
        ]
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


def declared_state(policy) -> StateOf | None:
    """The small state `policy` declares its play depends on besides the round: its own
    `play_state(history)` (a finite-state bot), else the last d joint actions for a finite
    `classifier["memory_depth"]` d (Axelrod's meaning: the number of past rounds it reads).
    None when nothing is declared (a language model, a strategy reading the whole history)."""
    own = getattr(policy, "play_state", None)
    if callable(own):
        return own
    depth = (getattr(policy, "classifier", None) or {}).get("memory_depth")
    if isinstance(depth, (int, np.integer)) and not isinstance(depth, bool) and depth >= 0:
        depth = int(depth)
        return lambda history: tuple(history[len(history) - min(len(history), depth):])
    return None


StateStep = Callable[[Hashable, int, int], Hashable]
"""The declared state after one more round (agent action a, opponent action o) from the state
before it: `StateOf` without re-reading the history (which costs time in the square of the rounds)."""


def declared_step(policy) -> StateStep | None:
    """`policy`'s own `play_state_after(state, a, o)`, else the step of a finite memory depth d
    (the last d joint actions); None when it declares neither (the state is then recomputed from
    each history)."""
    own = getattr(policy, "play_state_after", None)
    if callable(own):
        return own
    if callable(getattr(policy, "play_state", None)):
        return None
    depth = (getattr(policy, "classifier", None) or {}).get("memory_depth")
    if isinstance(depth, (int, np.integer)) and not isinstance(depth, bool) and depth >= 0:
        depth = int(depth)
        return lambda state, a, o: (state + ((a, o),))[len(state) + 1 - min(len(state) + 1, depth):]
    return None


def state_tree(stage: StageGame, rounds: int, reader: ProbabilityReader, state_of: StateOf,
               max_states: int | None = None, step: StateStep | None = None) -> AgentTree:
    """The agent's play on (round, declared state) nodes: per round one call of `reader` at one
    history of each state (histories reached with positive probability only), children by the
    state after each joint action. Exact for an agent whose declaration holds (`StateOf`).
    Nodes keep their state, not their witness history (rounds × history length would grow with
    the square of the rounds: 10,000 rounds reached 1.8 GB); with `step` a child's state comes from
    its parent's, not from its whole history. Progress counted in history rounds (reading round t costs about
    t)."""
    from sepo import progress

    _check(stage, rounds, None, 0.0)
    n_a, n_o = stage.shape
    limit = max_states if max_states is not None else memory_budget() // tree_node_bytes(n_a, n_o)
    witnesses: list[History] = [()]
    states: list = [state_of(())]
    levels, total = [], 1
    # reading a node builds its witness history's decision, work that grows with the round: the
    # count is in history rounds (t + 1 at round t), so the ETA does not grow as the rounds get longer
    with progress.counting("best response: history rounds read", rounds * (rounds + 1) // 2) as advance:
        for t in range(rounds):
            probs = _validated(reader([(t, h) for h in witnesses]), len(witnesses), n_a)
            children = np.full((len(witnesses), n_a, n_o), -1, dtype=np.int64)
            following: list[History] = []
            following_states: list = []
            if t + 1 < rounds:
                index: dict = {}
                for i, (history, parent) in enumerate(zip(witnesses, states)):
                    for a in np.nonzero(probs[i] > 0)[0].tolist():
                        for o in range(n_o):
                            child = history + ((a, o),) if step is None else None
                            state = state_of(child) if step is None else step(parent, a, o)
                            if state not in index:  # a witness history is built only for a new state
                                index[state] = len(following)
                                following.append(child if child is not None else history + ((a, o),))
                                following_states.append(state)
                            children[i, a, o] = index[state]
                total += len(following)
                if total > limit:
                    raise SepoError(
                        f"the agent's declared state has more than {limit:,} (round, state) nodes by round "
                        f"{t + 2}; its declaration cannot be small (give --memory M for a projection)"
                    )
            levels.append(Level(np.zeros((len(witnesses), 0), dtype=np.int64), probs, children,
                                np.full(len(witnesses), np.nan), states))
            witnesses, states = following, following_states
            advance(t + 1)
    return AgentTree(stage, rounds, None, 0.0, levels, state_of)


MAX_PROMPTED_STATES = 100_000
"""The most information states a text agent is read at in one audit (each is a prompt, replies
sampled at it): 2 actions a side over 8 rounds are 21,845 states, 9 over 4 rounds 538,084."""
BYTES_PER_AGENT_STATE = 4096
"""Memory per agent information state read through Python decisions (the state, its decision, the
reading, its row of the best response's JSON): measured 3.9 KB per state from 8 to 9 rounds of a
2×2 stage game; a node of the numpy DP itself is `sepo.limits.tree_node_bytes`, which grows with
the joint actions of a round (each node keeps the index of its children)."""


SATURATED = 10**300
"""Where `tree_states` stops counting: more states than any machine holds (`count_text` says "more
than 10^300"); the exact count of a long game's tree is a number of millions of digits."""


def tree_states(stage: StageGame, rounds: int, memory: int | None = None, threshold: float = 0.0) -> int:
    """The DP's states: sum over rounds of the remembered histories; with pruning, at most
    nO^t / threshold histories are kept at round t (for each opponent sequence the agent's reach
    sums to 1). In closed form (a million rounds are counted at once), at most `SATURATED`."""
    n_a, n_o = stage.shape
    k = n_a * n_o
    if threshold <= 0:
        depth = rounds if memory is None else min(memory, rounds)  # the rounds whose histories still grow
        if k > 1 and depth * math.log10(k) > 300:
            return SATURATED
        grown = depth if k == 1 else (k**depth - 1) // (k - 1)
        return min(SATURATED, grown + (rounds - depth) * k**depth)
    total, previous = 0, None
    for t in range(rounds):
        grows = t * math.log10(max(k, 2)) <= 300
        full = k ** (t if memory is None else min(t, memory)) if grows else SATURATED
        huge = t * math.log10(max(n_o, 1)) - math.log10(threshold) > 300
        kept = SATURATED if huge else int(n_o**t / threshold) + 1
        count = min(full, kept)
        if count == previous:  # both bounds stopped growing: the remaining rounds keep as many
            return min(SATURATED, total + (rounds - t) * count)
        total, previous = total + count, count
        if total >= SATURATED:
            return SATURATED
    return total


def tree_bytes(stage: StageGame, rounds: int, memory: int | None = None, threshold: float = 0.0,
               agent_states: int | None = None, training: bool = False) -> int:
    """The estimated memory of the DP's tree: `agent_states` (default: every DP state) read through
    Python decisions, and every DP state as a numpy node (`sepo.limits.tree_node_bytes`; `training`:
    as a training environment keeps it besides the solver's)."""
    states = tree_states(stage, rounds, memory, threshold)
    read = states if agent_states is None else agent_states
    return read * BYTES_PER_AGENT_STATE + states * tree_node_bytes(*stage.shape, training=training)


def check_tree_fits(stage: StageGame, rounds: int, memory: int | None = None, threshold: float = 0.0,
                    agent_states: int | None = None, what: str = "the joint-history tree",
                    training: bool = False) -> int:
    """Refuse, in one line, a tree whose estimated memory (`tree_bytes`) exceeds `memory_budget()`.
    Returns the number of DP states."""
    states = tree_states(stage, rounds, memory, threshold)
    need = tree_bytes(stage, rounds, memory, threshold, agent_states, training)
    budget = memory_budget()
    if need <= budget:
        return states
    sizes = (
        f"{what} at {rounds} rounds has {count_text(states)} states (about {size_text(need)}, more than the "
        f"{size_text(budget)} this machine can spare)"
    )
    if memory is None:
        raise SepoError(
            f"{sizes}; give --memory M to solve a memory-M projection, --threshold P to prune branches the "
            "agent reaches with probability below P, or fewer --rounds"
        )
    fits = next((m for m in range(memory - 1, -1, -1)
                 if _memory_need(stage, rounds, m, agent_states is not None, training) <= budget), None)
    smaller = f"--memory {fits} or less" if fits is not None else "no --memory fits"
    raise SepoError(f"{sizes}: --memory {memory} keeps too many; give {smaller}, or fewer --rounds")


def _memory_need(stage: StageGame, rounds: int, memory: int, keyed: bool, training: bool = False) -> int:
    """`check_tree_fits`'s estimate for the memory-`memory` states; `keyed`: the agent is read
    once per key (every remembered history) rather than once per DP state."""
    n = stage.shape[0] * stage.shape[1]
    read = sum(n**past for past in range(min(memory, rounds - 1) + 1)) if keyed else None
    return tree_bytes(stage, rounds, memory, agent_states=read, training=training)


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
    state_of: StateOf | None = None  # rows are (round, the agent's declared state)
    states: list[list] | None = None  # each row's declared state, when state_of is set
    _lookup: dict = field(default=None, repr=False)

    def _key(self, t: int, history: History):
        if self.state_of is not None:
            return t, self.state_of(tuple(history))
        remembered = (
            history if self.memory is None else history[len(history) - min(len(history), self.memory) :]
        )
        return t, tuple(a * self.n_opponent + o for a, o in remembered)

    def action(self, t: int, history: History) -> int:
        """The table's action at round t after `history` (agent-first joint actions)."""
        if self._lookup is None and self.state_of is not None:
            self._lookup = {
                (t, state): int(a)
                for t, (states, acts) in enumerate(zip(self.states, self.actions))
                for state, a in zip(states, acts)
            }
        if self._lookup is None:
            self._lookup = {
                self._key(t, as_history(row, self.n_opponent)): int(a)
                for t, (rows, acts) in enumerate(zip(self.histories, self.actions))
                for row, a in zip(rows, acts)
            }
        return self._lookup.get(self._key(t, history), self.fallback)

    def to_json(
        self, agent_names: Sequence[str] | None = None, opponent_names: Sequence[str] | None = None
    ) -> list[dict]:
        """Rows {round, history, action} in round order, with action names where given; for a
        declared state, {round, agent_state, action}: one row per DP node, its size independent of
        the round (a history string per row would grow with the square of the rounds)."""
        name_a = agent_names or [str(a) for a in range(self.n_agent)]
        name_o = opponent_names or [str(o) for o in range(self.n_opponent)]
        if self.state_of is not None:
            return [{"round": t + 1, "agent_state": repr(state), "action": name_o[int(action)]}
                    for t, (states, actions) in enumerate(zip(self.states, self.actions))
                    for state, action in zip(states, actions)]
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

    def __init__(
        self,
        table: OpponentTable,
        name: str = "BestResponse",
        agent_names: Sequence[str] | None = None,
        opponent_names: Sequence[str] | None = None,
    ):
        self.table, self.name = table, name
        self.names = (agent_names, opponent_names)
        self.classifier = {
            "stochastic": False,
            "memory_depth": table.memory if table.state_of is None else None,
        }

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
            value=self.gap,
            value_name=value_name,
            br_payoff=self.br_payoff,
            agent_payoff=self.br_agent_payoff,
            method=method
            + (f", branches below agent reach {self.threshold:g} pruned" if self.threshold else ""),
            exact=self.gap_bound == 0.0,
            pruning_bound=self.gap_bound,
            extra={
                "br_pruning_bound": self.br_bound,
                "agent_payoff_vs_gap_maximiser": self.gap_agent_payoff,
                "opponent_payoff_vs_gap_maximiser": self.gap_opponent_payoff,
                "states": self.states,
            },
        )

    def summary(self) -> dict:
        return {
            "adversarial_gap": self.gap,
            "pruning_bound": self.gap_bound,
            "br_payoff": self.br_payoff,
            "br_pruning_bound": self.br_bound,
            "agent_payoff_vs_br": self.br_agent_payoff,
            "agent_payoff_vs_gap_maximiser": self.gap_agent_payoff,
            "opponent_payoff_vs_gap_maximiser": self.gap_opponent_payoff,
            "states": self.states,
            "threshold": self.threshold,
            "memory": self.memory,
            "rounds": self.rounds,
        }


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
            choice = np.where(
                q >= best - 1e-9 * max(1.0, high - low) * max(remaining + 1, 1), second, -np.inf
            ).argmax(1)
            second_next = np.take_along_axis(second, choice[:, None], 1)[:, 0]
        value_next = np.take_along_axis(q, choice[:, None], 1)[:, 0]
        if pruning and remaining > 0:
            error = _expect(
                level.probs, np.zeros_like(reward), np.where(pruned, half * remaining, bound_next[index])
            )
            bound_next = error.max(1)
        else:
            bound_next = np.zeros(len(q))
        choices[t], values[t], bounds[t] = choice, value_next, bound_next
    return choices, values, bounds


def _follow(
    tree: AgentTree, choices: list[np.ndarray], payoff: np.ndarray, reaches: list[np.ndarray] | None = None
) -> float:
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
    states = [level.states for level in tree.levels] if tree.state_of is not None else None
    return RepeatedResult(
        rounds=rounds,
        gap=float(gap_values[0][0]) / rounds,
        gap_bound=float(gap_bounds[0][0]) / rounds,
        gap_agent_payoff=_follow(tree, gap_choice, stage.agent, reaches) / rounds,
        gap_opponent_payoff=_follow(tree, gap_choice, stage.opponent, reaches) / rounds,
        br_payoff=float(br_values[0][0]) / rounds,
        br_bound=float(br_bounds[0][0]) / rounds,
        br_agent_payoff=_follow(tree, br_choice, stage.agent, br_reaches) / rounds,
        gap_table=OpponentTable(
            rounds, tree.memory, n_a, n_o, histories, gap_choice, fallback_gap, tree.state_of, states
        ),
        br_table=OpponentTable(
            rounds, tree.memory, n_a, n_o, histories, br_choice, fallback_br, tree.state_of, states
        ),
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


class RepeatedAudit:
    """`audit(agent, ...)`, what `sepo exploit` asks a repeated game's solver, shared by the
    domains whose solvers run this DP. A domain's solver provides `game` (with `rounds` and
    `memory`), `stage`, `keys`, `decisions()`, `solve_table(table, threshold)`, `result(solved)`,
    `response(solved)`, `decision_after(history)` (the agent's decision after a history of (own,
    other) actions) and `whole_history()` (the same game's solver over whole histories).

    Which tree, from what is known about the agent (never from the solver alone):
    - a table over the solver's keys: the table's own states, exact;
    - an agent that declares a small state (`declared_state`): the DP over (round, that state),
      exact whatever the number of rounds, unless a projection is asked for;
    - `projection` (the user gave `--memory M`): the memory-M states, exact only for an agent that
      declares it reads at most M rounds, else labelled the gap of a memory-M projection;
    - anything else (a language model, a strategy reading the whole history): the whole history
      the agent reads, exact, or pruned below `threshold` with its error bound; refused in one
      line when it would not fit in memory."""

    def audit(self, agent: Policy, threshold: float = 0.0, projection: bool = False, replicates: int = 1000,
              seed: int = 0):
        from dataclasses import replace

        from sepo.metrics.exact import Audit

        if threshold and not 0.0 < threshold < 1.0:
            raise SepoError(f"--threshold must be in (0, 1), got {threshold}")
        memory = self.game.memory
        if threshold and memory is not None and projection:
            raise SepoError("--threshold needs the full history tree; drop --memory to prune")
        if getattr(agent, "table", None) is not None and getattr(agent, "keys", None) is not None \
                and memory is not None and tuple(agent.keys) == tuple(self.keys):
            if threshold:
                raise SepoError(
                    "--threshold needs the full history tree; a table over the last rounds is solved exactly "
                    "without it"
                )
            return self._audit_table(agent, self, replicates, seed, labelled_for=None)
        state_of = declared_state(agent)
        if state_of is not None and not (projection and memory is not None):
            solved = solve(state_tree(self.stage, self.game.rounds, self._reader(agent), state_of,
                                      step=declared_step(agent)))
            result = self.result(solved)
            method = (
                f"exact DP over (round, the agent's declared state) nodes: {solved.states} nodes over "
                f"{self.game.rounds} rounds"
                + ("; nothing pruned (--threshold is not needed)" if threshold else "")
            )
            return Audit(replace(result, method=method), self.response(solved),
                         {"read": "exact", "read_exactly": True, "states": solved.states})
        if memory is not None and projection:
            try:
                return self._audit_table(agent, self, replicates, seed, labelled_for=agent)
            except SepoError as error:
                if state_of is None:
                    raise
                depth = (getattr(agent, "classifier", None) or {}).get("memory_depth")
                reads = (
                    f"it reads {depth} round{'s' if depth != 1 else ''}"
                    if isinstance(depth, int)
                    else "its own state"
                )
                raise SepoError(
                    f"--memory {memory} does not apply to {getattr(agent, 'name', 'this agent')}: it "
                    f"declares {reads} and is solved exactly without --memory at any number of rounds (drop "
                    f"it); its memory-{memory} projection does not fit ({str(error).split(' (')[0]})"
                ) from None
        whole = self if memory is None else self.whole_history()
        if threshold:
            return whole._audit_pruned(agent, threshold, replicates, seed)
        return self._audit_table(agent, whole, replicates, seed, labelled_for=None)

    def _reader(self, agent: Policy):
        """Reads `agent`'s played policy at (round, history) queries, one batched call each."""
        from sepo.policies.text_policy import policy_estimate

        def reader(queries):
            decisions = [self.decision_after(history) for _, history in queries]
            return policy_estimate(agent, decisions).table()[:, : self.stage.shape[0]]

        return reader

    def _audit_table(self, agent: Policy, solver, replicates: int, seed: int, labelled_for):
        """The agent read at every key of `solver` (one batched call), solved; for an estimated
        policy, the value's interval from its resampled replies."""
        from sepo.metrics.bootstrap import boundary_interval
        from sepo.metrics.exact import Audit, labelled, no_action_probabilities
        from sepo.policies.text_policy import policy_estimate

        # whole histories are counted without building them (538,084 keys of 9 actions over 4 rounds take 30
        # s)
        prompts = (
            (
                tree_states(solver.stage, solver.game.rounds)
                if solver.game.memory is None
                else len(solver.keys)
            )
            if callable(getattr(agent, "estimate", None))
            else 0
        )
        if prompts > MAX_PROMPTED_STATES:
            raise SepoError(
                f"reading the agent at all {count_text(prompts)} information states of {solver.game.rounds} "
                f"rounds means as many prompts (more than {MAX_PROMPTED_STATES:,}); give --threshold P to "
                "read only the branches it reaches with probability at least P, --memory M for a memory-M "
                "projection, or fewer --rounds"
            )
        try:
            estimate = policy_estimate(agent, solver.decisions())
        except NotImplementedError as error:
            raise no_action_probabilities(agent, error) from None
        table = estimate.table()
        solved = solver.solve_table(table)
        result = solver.result(solved)
        if labelled_for is not None:
            result = labelled(result, labelled_for, solver.game.memory, solver.keys)
        interval = None
        if not estimate.exact:
            values = np.array([solver.solve_table(t).gap for t in estimate.resample(replicates, seed)])
            interval = list(boundary_interval(result.value, values))
        return Audit(result, solver.response(solved), estimate.record(), interval)

    def _audit_pruned(self, agent: Policy, threshold: float, replicates: int, seed: int):
        """The agent read one batched call per round on the branches it reaches with probability at
        least `threshold`; for an estimated policy, the value's interval from its resampled replies
        on the same branches."""
        from sepo.metrics.bootstrap import boundary_interval
        from sepo.metrics.exact import Audit
        from sepo.policies.text_policy import policy_estimate

        check_tree_fits(self.stage, self.game.rounds, None, threshold, what="the pruned joint-history tree")
        n_a = self.stage.shape[0]
        estimates, rows = [], []  # per reader call: its estimate, and per query the estimate's row

        def reader(queries):
            decisions, index = {}, []  # a prompt met twice (the same key) is read once
            for _, history in queries:
                decision = self.decision_after(history)
                index.append(decisions.setdefault(decision.info_key, (len(decisions), decision))[0])
            estimate = policy_estimate(agent, [decision for _, decision in decisions.values()])
            estimates.append(estimate)
            rows.append(np.array(index, dtype=np.int64))
            return estimate.table()[index, :n_a]

        tree = read_agent(self.stage, self.game.rounds, reader, None, threshold)
        solved = solve(tree)
        exact_policy = all(e.exact for e in estimates)  # nothing sampled: no sampling interval
        claims_exact = all(e.claims_exact for e in estimates)  # and every reply covered
        rest = max((e.rest for e in estimates), default=0.0)
        interval = None
        if not exact_policy:
            draws = [e.resample(replicates, seed + i) for i, e in enumerate(estimates)]
            values = []
            for r in range(replicates):
                levels = [Level(level.histories, draw[r][index, :n_a], level.children, level.reach)
                          for level, draw, index in zip(tree.levels, draws, rows)]
                values.append(gap_value(AgentTree(tree.stage, tree.rounds, None, threshold, levels)))
            interval = list(boundary_interval(solved.gap, np.array(values)))
        states = sum(len(e.decisions) for e in estimates)
        samples = max((e.samples for e in estimates), default=0)
        if not exact_policy:
            read = f"estimated ({samples} replies per state)"
        else:
            read = next((e.label for e in estimates if e.rest == rest and not e.claims_exact), "exact")
        record = {
            "read": read,
            "read_exactly": claims_exact,
            "replies_per_state": None if exact_policy else samples,
            **({"rest": rest} if exact_policy and not claims_exact else {}),
            "states": states,
            "invalid_replies": int(sum(sum(e.invalid) for e in estimates)),
            "replies": int(sum(sum(c.sum() for c in e.counts) for e in estimates)),
        }
        return Audit(self.result(solved), self.response(solved), record, interval)
