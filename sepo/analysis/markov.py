"""Finite discounted Markov games given as data: exact policy evaluation and best-response values.

Under a joint stationary policy pi, player i's values solve the Bellman equations

    V_i(s) = sum_a pi(a|s) [ r_i(s, a) + gamma * sum_s' P(s'|s, a) V_i(s') ],

a linear system (I - gamma P_pi) V_i = r_pi,i over the non-terminal states, solved exactly with
numpy. A terminal state has a fixed value per player (default 0). Player i's best response to
pi_-i is an MDP; policy iteration solves it exactly (each evaluation is the same linear solve,
and it stops when no state has a strictly better action). gain_i(s) = V_i^BR(s) - V_i^pi(s),
and their sum at the start state is the NashConv of pi there.

File format (YAML or JSON):

    players: [drafter, checker]
    gamma: 0.9
    start: draft                      # optional; default the first state
    states:
      draft:
        actions: {drafter: [careful, rushed], checker: [wait]}
        outcomes:                     # one entry per joint action
          - joint: [careful, wait]
            rewards: [1, 0]
            next: {review: 1.0}
          - ...
      done: {value: [0, 0]}           # terminal: no outcomes, fixed value per player
    policy:                           # a distribution per state and player (single actions may be omitted)
      draft: {drafter: {careful: 0.5, rushed: 0.5}}
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from sepo.analysis.equilibria import product_distribution
from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.io import (
    as_name_list,
    as_number,
    as_probability,
    distribution,
    joint_action,
    numeric_tensor,
    read_data,
    require_key,
    require_mapping,
)

MarkovPolicy = dict[str, tuple[np.ndarray, ...]]


@dataclass(frozen=True, eq=False)
class MarkovGame:
    """States, per-state action sets, reward tensors `[n, |A_1(s)|, ..., |A_n(s)|]` and transition
    tensors `[|A_1(s)|, ..., |A_n(s)|, states]`; terminal states carry fixed values instead."""

    players: tuple[str, ...]
    states: tuple[str, ...]
    gamma: float
    start: str
    actions: dict[str, tuple[tuple[str, ...], ...]]
    rewards: dict[str, np.ndarray]
    transitions: dict[str, np.ndarray]
    terminal_values: dict[str, np.ndarray]
    source: str = "<memory>"
    policy: MarkovPolicy | None = None

    @property
    def decision_states(self) -> list[str]:
        return [s for s in self.states if s not in self.terminal_values]

    def policy_from_data(self, data: Any, field: str = "policy") -> MarkovPolicy:
        """Parse a joint policy; a player with one action at a state may be left out there."""
        data = require_mapping(data if data is not None else {}, self.source, field)
        unknown = [s for s in data if s not in self.decision_states]
        if unknown:
            raise AnalysisInputError(
                self.source,
                f"{field}.{unknown[0]}",
                f"not a decision state; decision states: {', '.join(self.decision_states)}",
            )
        policy = {}
        for s in self.decision_states:
            entry = require_mapping(data.get(s, {}), self.source, f"{field}.{s}")
            stray = [p for p in entry if p not in self.players]
            if stray:
                raise AnalysisInputError(
                    self.source,
                    f"{field}.{s}.{stray[0]}",
                    f"unknown player; players are {', '.join(self.players)}",
                )
            profile = []
            for i, player in enumerate(self.players):
                names = self.actions[s][i]
                if player in entry:
                    profile.append(distribution(entry[player], names, self.source, f"{field}.{s}.{player}"))
                elif len(names) == 1:
                    profile.append(np.ones(1))
                else:
                    raise AnalysisInputError(
                        self.source,
                        f"{field}.{s}.{player}",
                        f"missing: {player} has {len(names)} actions at {s}",
                    )
            policy[s] = tuple(profile)
        return policy

    def _joint_step(self, state: str, profile) -> tuple[np.ndarray, np.ndarray]:
        """Expected rewards `[n]` and next-state distribution `[states]` at `state` under `profile`."""
        joint = product_distribution(profile)
        n = len(self.players)
        return (
            np.tensordot(self.rewards[state], joint, axes=n),
            np.tensordot(joint, self.transitions[state], axes=n),
        )

    def evaluate(self, policy: MarkovPolicy) -> dict[str, np.ndarray]:
        """V^pi(s) for every state: an array `[n]` of each player's value."""
        steps = {s: self._joint_step(s, policy[s]) for s in self.decision_states}
        return self._solve(steps)

    def _solve(self, steps: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
        decision = self.decision_states
        index = {s: k for k, s in enumerate(self.states)}
        rows = [index[s] for s in decision]
        terminal_rows = [index[s] for s in self.terminal_values]
        n = len(self.players)
        terminal = np.array([self.terminal_values[s] for s in self.terminal_values]).reshape(-1, n)
        transition = np.array([steps[s][1] for s in decision]).reshape(len(decision), len(self.states))
        reward = np.array([steps[s][0] for s in decision]).reshape(len(decision), n)
        rhs = reward + self.gamma * transition[:, terminal_rows] @ terminal
        system = np.eye(len(decision)) - self.gamma * transition[:, rows]
        try:
            solved = np.linalg.solve(system, rhs)
        except np.linalg.LinAlgError:
            raise AnalysisInputError(
                self.source,
                "gamma",
                "the Bellman system is singular: with gamma = 1 every policy must reach a terminal state",
            ) from None
        values = {s: solved[k] for k, s in enumerate(decision)}
        values.update({s: np.asarray(v, dtype=float) for s, v in self.terminal_values.items()})
        return values

    def best_response(
        self, policy: MarkovPolicy, player: int
    ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Player's best-response values V^BR(s) (array `[n]`, the player's own entry is the
        best-response value) against the others' `policy`, and the greedy pure policy, by policy
        iteration started from the player's own policy."""
        current = dict(policy)
        while True:
            values = self.evaluate(current)
            own = np.array([values[s][player] for s in self.states])
            greedy, improved = {}, False
            for s in self.decision_states:
                q = self.action_values(current, player, s, own)
                held = float(q @ current[s][player])
                greedy[s] = int(q.argmax())
                if q[greedy[s]] > held + 1e-12 * max(1.0, abs(held)):
                    profile = list(current[s])
                    profile[player] = np.eye(len(q))[greedy[s]]
                    current[s] = tuple(profile)
                    improved = True
            if not improved:
                return values, greedy

    def action_values(
        self, policy: MarkovPolicy, player: int, state: str, own_values: np.ndarray
    ) -> np.ndarray:
        """Q(s, a) of each of the player's actions at `state`, others following `policy`."""
        q = []
        for a in range(len(self.actions[state][player])):
            profile = list(policy[state])
            profile[player] = np.eye(len(profile[player]))[a]
            reward, next_states = self._joint_step(state, profile)
            q.append(reward[player] + self.gamma * next_states @ own_values)
        return np.array(q)

    def audit(self, policy: MarkovPolicy) -> dict:
        """Values at the start state, each player's best-response value and gain, and NashConv."""
        values = self.evaluate(policy)
        report = {"start": self.start, "gamma": self.gamma, "players": {}}
        nash_conv = 0.0
        for i, player in enumerate(self.players):
            best, choice = self.best_response(policy, i)
            gain = max(0.0, float(best[self.start][i] - values[self.start][i]))
            nash_conv += gain
            report["players"][player] = {
                "value": float(values[self.start][i]),
                "best_response_value": float(best[self.start][i]),
                "gain": gain,
                "best_response": {s: self.actions[s][i][a] for s, a in choice.items()},
            }
        report["nash_conv"] = nash_conv
        report["values"] = {s: dict(zip(self.players, map(float, v))) for s, v in values.items()}
        return report


def load_markov_game(path: str | Path) -> MarkovGame:
    return markov_game_from_data(read_data(path), str(path))


def markov_game_from_data(data: Any, source: str = "<memory>") -> MarkovGame:
    data = require_mapping(data, source, "top level")
    players = as_name_list(require_key(data, "players", source), source, "players")
    gamma = as_number(require_key(data, "gamma", source), source, "gamma")
    if not 0.0 <= gamma <= 1.0:
        raise AnalysisInputError(source, "gamma", f"a discount factor lies in [0, 1], got {gamma}")
    states_data = require_mapping(require_key(data, "states", source), source, "states")
    states = as_name_list(list(states_data), source, "states")
    actions, rewards, transitions, terminal = {}, {}, {}, {}
    n = len(players)
    for s in states:
        entry = require_mapping(states_data[s] if states_data[s] is not None else {}, source, f"states.{s}")
        if "outcomes" not in entry:
            value = entry.get("value", [0.0] * n)
            terminal[s] = _per_player(value, players, source, f"states.{s}.value")
            continue
        action_data = require_mapping(
            require_key(entry, "actions", source, f"states.{s}."), source, f"states.{s}.actions"
        )
        stray = [p for p in action_data if p not in players]
        if stray:
            raise AnalysisInputError(
                source, f"states.{s}.actions.{stray[0]}", f"unknown player; players are {', '.join(players)}"
            )
        actions[s] = tuple(
            as_name_list(
                require_key(action_data, p, source, f"states.{s}.actions."), source, f"states.{s}.actions.{p}"
            )
            for p in players
        )
        shape = tuple(len(a) for a in actions[s])
        rewards[s] = np.zeros((n,) + shape)
        transitions[s] = np.zeros(shape + (len(states),))
        seen = set()
        outcomes = entry["outcomes"]
        if not isinstance(outcomes, Sequence) or isinstance(outcomes, str):
            raise AnalysisInputError(
                source, f"states.{s}.outcomes", "expected a list of outcomes, one per joint action"
            )
        for k, outcome in enumerate(outcomes):
            field = f"states.{s}.outcomes[{k}]"
            outcome = require_mapping(outcome, source, field)
            joint = joint_action(
                require_key(outcome, "joint", source, field + "."),
                players,
                actions[s],
                source,
                field + ".joint",
            )
            if joint in seen:
                raise AnalysisInputError(source, field + ".joint", "this joint action is listed twice")
            seen.add(joint)
            rewards[s][(slice(None), *joint)] = _per_player(
                require_key(outcome, "rewards", source, field + "."), players, source, field + ".rewards"
            )
            transitions[s][joint] = _next_states(
                require_key(outcome, "next", source, field + "."), states, source, field + ".next"
            )
        for joint in itertools.product(*(range(size) for size in shape)):
            if joint not in seen:
                names = ", ".join(actions[s][i][a] for i, a in enumerate(joint))
                raise AnalysisInputError(
                    source,
                    f"states.{s}.outcomes",
                    f"no outcome for joint action [{names}]; every joint action needs one",
                )
    if not actions:
        raise AnalysisInputError(source, "states", "no decision state (a state with outcomes)")
    start = str(data.get("start", states[0]))
    if start not in states:
        raise AnalysisInputError(source, "start", f"unknown state {start!r}; states: {', '.join(states)}")
    game = MarkovGame(players, states, gamma, start, actions, rewards, transitions, terminal, source)
    if "policy" in data or all(len(a) == 1 for acts in actions.values() for a in acts):
        object.__setattr__(game, "policy", game.policy_from_data(data.get("policy")))
    return game


def _per_player(value: Any, players, source: str, field: str) -> np.ndarray:
    if isinstance(value, Mapping):
        stray = [p for p in value if p not in players]
        if stray:
            raise AnalysisInputError(
                source, f"{field}.{stray[0]}", f"unknown player; players are {', '.join(players)}"
            )
        return np.array([as_number(value[p], source, f"{field}.{p}") if p in value else 0.0 for p in players])
    return numeric_tensor(value, [(len(players), "one per player")], source, field)


def _next_states(value: Any, states, source: str, field: str) -> np.ndarray:
    if isinstance(value, str):
        value = {value: 1.0}
    value = require_mapping(value, source, field)
    vector = np.zeros(len(states))
    for name, probability in value.items():
        if name not in states:
            raise AnalysisInputError(source, f"{field}.{name}", f"unknown state; states: {', '.join(states)}")
        vector[states.index(name)] = as_probability(probability, source, f"{field}.{name}")
    if abs(vector.sum() - 1.0) > 1e-6:
        raise AnalysisInputError(
            source, field, f"probabilities sum to {vector.sum():.10g}; they must sum to 1"
        )
    return vector / vector.sum()
