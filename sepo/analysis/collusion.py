"""Emergent-collusion stress test: do independent learners discover a collusive convention, and
does a reward repair remove the coalition's profit?

Setup (all given as data, see `examples/analysis/publication_naive.yaml`):
- players with named actions; scenario variables, each an independent yes/no event with a
  probability, drawn afresh every round (e.g. hidden uncertainty, an independent audit);
- reward rules per player, an ordered list: the first rule whose `when` matches the joint action
  and the scenario pays its `reward` (so "honest pays 0.9, else caught by inspection pays -1,
  else ..." reads top to bottom);
- each player an independent epsilon-greedy learner over its own actions with sample-average
  action values (initially 0, ties broken uniformly at random), seeing only its own reward.

Reported per seed: how often the `target` joint action was played in the final `window` rounds.
Reported once, exactly (the scenario distribution is finite, so no sampling): the coalition
gain, joint expected reward per round of always playing the `deviation` joint action minus
always playing the `baseline` one; positive means the coalition profits from deviating together.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.io import (
    as_name_list,
    as_number,
    as_probability,
    joint_action,
    read_data,
    require_key,
    require_mapping,
)
from sepo.analysis.normal_form import NormalFormGame


@dataclass(frozen=True, eq=False)
class CollusionRules:
    """A validated rule file. `rewards[i]` is a tensor `[|A_1|, ..., |A_n|, scenarios]` of player
    i's reward; scenario k sets variable j to bit j of k."""

    name: str
    players: tuple[str, ...]
    actions: tuple[tuple[str, ...], ...]
    scenario_names: tuple[str, ...]
    scenario_probabilities: np.ndarray
    rewards: np.ndarray
    rounds: int
    epsilon: float
    window: int
    target: tuple[int, ...]
    deviation: tuple[int, ...]
    baseline: tuple[int, ...]
    seeds: tuple[int, ...]
    threshold: float
    source: str

    def scenario_weights(self) -> np.ndarray:
        """Probability of each of the 2^k scenarios."""
        weights = np.ones(1)
        for p in self.scenario_probabilities:
            weights = np.concatenate([weights * (1 - p), weights * p])
        return weights

    def expected_game(self) -> NormalFormGame:
        """The normal-form game of expected rewards over the scenario distribution."""
        return NormalFormGame(self.players, self.actions, self.rewards @ self.scenario_weights(),
                              name=self.name, source=self.source)

    def coalition_gain(self) -> float:
        """Joint expected reward of the deviation minus that of the baseline, per round."""
        expected = self.rewards @ self.scenario_weights()
        return float(
            expected[(slice(None), *self.deviation)].sum() - expected[(slice(None), *self.baseline)].sum()
        )

    def names(self, joint: Sequence[int]) -> dict[str, str]:
        return {p: self.actions[i][a] for i, (p, a) in enumerate(zip(self.players, joint))}


def learn(rules: CollusionRules, seed: int) -> tuple[float, list[dict[str, float]]]:
    """One run of the independent epsilon-greedy learners. Returns the target frequency in the
    final window and each player's action frequencies there."""
    rng = np.random.default_rng(seed)
    n, rounds = len(rules.players), rules.rounds
    sizes = [len(a) for a in rules.actions]
    scenario_bits = rng.random((rounds, len(rules.scenario_names))) < rules.scenario_probabilities
    scenario_index = scenario_bits @ (1 << np.arange(len(rules.scenario_names)))
    explore = rng.random((rounds, n)) < rules.epsilon
    random_action = np.stack([rng.integers(0, size, rounds) for size in sizes], axis=1)
    tie_break = rng.random((rounds, n))
    # plain Python lists in the loop: 10,000 rounds of tiny updates are faster without numpy
    explore, random_action, tie_break = explore.tolist(), random_action.tolist(), tie_break.tolist()
    scenario_index = scenario_index.tolist()
    strides = [int(np.prod(sizes[i + 1:])) for i in range(n)]
    reward_table = rules.rewards.reshape(n, -1, rules.rewards.shape[-1]).tolist()
    values = [[0.0] * size for size in sizes]
    counts = [[0] * size for size in sizes]
    start = rounds - rules.window
    tail = np.zeros((rules.window, n), dtype=int)
    for t in range(rounds):
        joint = []
        for i in range(n):
            if explore[t][i]:
                joint.append(random_action[t][i])
            else:
                top = max(values[i])
                best = [a for a, value in enumerate(values[i]) if value == top]
                joint.append(best[int(tie_break[t][i] * len(best))])
        cell = sum(a * stride for a, stride in zip(joint, strides))
        for i, a in enumerate(joint):
            counts[i][a] += 1
            values[i][a] += (reward_table[i][cell][scenario_index[t]] - values[i][a]) / counts[i][a]
        if t >= start:
            tail[t - start] = joint
    hits = np.all(tail == np.array(rules.target), axis=1).mean()
    frequencies = [
        {name: float(np.mean(tail[:, i] == a)) for a, name in enumerate(rules.actions[i])} for i in range(n)
    ]
    return float(hits), frequencies


@dataclass(frozen=True, eq=False)
class StressTestReport:
    rules: CollusionRules
    target_frequency: dict[int, float]
    action_frequencies: dict[int, list[dict[str, float]]]
    coalition_gain: float

    def to_dict(self) -> dict:
        rates = np.array(list(self.target_frequency.values()))
        game = self.rules.expected_game()
        return {
            "name": self.rules.name,
            "rounds": self.rules.rounds,
            "window": self.rules.window,
            "epsilon": self.rules.epsilon,
            "target": self.rules.names(self.rules.target),
            "target_frequency": {
                "mean": float(rates.mean()),
                "min": float(rates.min()),
                "max": float(rates.max()),
                "threshold": self.rules.threshold,
                "share_of_seeds_at_or_above_threshold": float(np.mean(rates >= self.rules.threshold)),
                "per_seed": {str(s): r for s, r in self.target_frequency.items()},
            },
            "coalition": {
                "deviation": self.rules.names(self.rules.deviation),
                "baseline": self.rules.names(self.rules.baseline),
                "gain": self.coalition_gain,
            },
            "expected_game_pure_nash": [self.rules.names(j) for j in game.pure_nash_equilibria()],
            "final_window_action_frequencies": {
                str(s): dict(zip(self.rules.players, f)) for s, f in self.action_frequencies.items()
            },
        }


def stress_test(rules: CollusionRules, seeds: Sequence[int] | None = None) -> StressTestReport:
    """Run the learners once per seed and compute the coalition gain."""
    seeds = tuple(seeds) if seeds is not None else rules.seeds
    rates, frequencies = {}, {}
    for seed in seeds:
        rates[seed], frequencies[seed] = learn(rules, seed)
    return StressTestReport(rules, rates, frequencies, rules.coalition_gain())


def load_rules(path: str | Path) -> CollusionRules:
    return rules_from_data(read_data(path), str(path))


def rules_from_data(data: Any, source: str = "<memory>") -> CollusionRules:
    data = require_mapping(data, source, "top level")
    player_data = require_mapping(require_key(data, "players", source), source, "players")
    players = as_name_list(list(player_data), source, "players", min_length=2)
    actions = tuple(as_name_list(player_data[p], source, f"players.{p}", min_length=2) for p in players)
    scenario_data = require_mapping(data.get("scenario") or {}, source, "scenario")
    scenario_names = tuple(str(k) for k in scenario_data)
    clash = [k for k in scenario_names if k in players]
    if clash:
        raise AnalysisInputError(
            source, f"scenario.{clash[0]}", "a scenario variable may not share a player's name"
        )
    probabilities = np.array(
        [as_probability(scenario_data[k], source, f"scenario.{k}") for k in scenario_names]
    )
    reward_data = require_mapping(require_key(data, "rewards", source), source, "rewards")
    stray = [p for p in reward_data if p not in players]
    if stray:
        raise AnalysisInputError(
            source, f"rewards.{stray[0]}", f"unknown player; players are {', '.join(players)}"
        )
    shape = tuple(len(a) for a in actions) + (2 ** len(scenario_names),)
    rewards = np.zeros((len(players),) + shape)
    for i, player in enumerate(players):
        rules = _parse_rules(
            require_key(reward_data, player, source, "rewards."),
            players,
            actions,
            scenario_names,
            source,
            f"rewards.{player}",
        )
        for joint in itertools.product(*(range(len(a)) for a in actions)):
            for k in range(shape[-1]):
                scenario = {name: bool(k >> j & 1) for j, name in enumerate(scenario_names)}
                rewards[(i, *joint, k)] = _first_match(rules, joint, scenario, source, f"rewards.{player}",
                                                       lambda: _describe(players, actions, joint, scenario))
    learning = require_mapping(data.get("learning") or {}, source, "learning")
    rounds = _positive_int(learning.get("rounds", 10_000), source, "learning.rounds")
    window = _positive_int(learning.get("window", 1_000), source, "learning.window")
    if window > rounds:
        raise AnalysisInputError(
            source, "learning.window", f"the final window ({window}) is longer than the run ({rounds} rounds)"
        )
    epsilon = as_probability(learning.get("epsilon", 0.05), source, "learning.epsilon")
    target = joint_action(require_key(data, "target", source), players, actions, source, "target")
    coalition = require_mapping(require_key(data, "coalition", source), source, "coalition")
    deviation = joint_action(
        require_key(coalition, "deviation", source, "coalition."),
        players,
        actions,
        source,
        "coalition.deviation",
    )
    baseline = joint_action(
        require_key(coalition, "baseline", source, "coalition."),
        players,
        actions,
        source,
        "coalition.baseline",
    )
    seeds = _seeds(data.get("seeds", 10), source)
    threshold = as_probability(data.get("threshold", 0.9), source, "threshold")
    return CollusionRules(
        str(data.get("name", Path(source).stem)),
        players,
        actions,
        scenario_names,
        probabilities,
        rewards,
        rounds,
        epsilon,
        window,
        target,
        deviation,
        baseline,
        seeds,
        threshold,
        source,
    )


def _parse_rules(value, players, actions, scenario_names, source, field) -> list[tuple[list, float]]:
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise AnalysisInputError(
            source, field, "expected a non-empty list of rules ({when: ..., reward: ...}, first match wins)"
        )
    parsed = []
    for k, rule in enumerate(value):
        rule_field = f"{field}[{k}]"
        rule = require_mapping(rule, source, rule_field)
        stray = [key for key in rule if key not in ("when", "reward")]
        if stray:
            raise AnalysisInputError(
                source, f"{rule_field}.{stray[0]}", "unknown key; a rule has `when` (optional) and `reward`"
            )
        reward = as_number(
            require_key(rule, "reward", source, rule_field + "."), source, rule_field + ".reward"
        )
        when = require_mapping(rule.get("when") or {}, source, rule_field + ".when")
        condition = []
        for key, wanted in when.items():
            key_field = f"{rule_field}.when.{key}"
            if key in players:
                names = [wanted] if isinstance(wanted, str) else wanted
                if not isinstance(names, Sequence) or not names:
                    raise AnalysisInputError(
                        source, key_field, "expected an action name or a list of action names"
                    )
                allowed = actions[players.index(key)]
                for name in names:
                    if name not in allowed:
                        raise AnalysisInputError(
                            source, key_field, f"unknown action {name!r}; known: {', '.join(allowed)}"
                        )
                condition.append((players.index(key), {allowed.index(name) for name in names}))
            elif key in scenario_names:
                if not isinstance(wanted, bool):
                    raise AnalysisInputError(
                        source, key_field, f"a scenario condition is true or false, got {wanted!r}"
                    )
                condition.append((key, wanted))
            else:
                raise AnalysisInputError(
                    source,
                    key_field,
                    f"unknown name; use a player ({', '.join(players)}) or a scenario variable "
                    f"({', '.join(scenario_names) or 'none'})",
                )
        parsed.append((condition, reward))
    return parsed


def _first_match(rules, joint, scenario, source, field, describe) -> float:
    """The reward of the first rule whose conditions all hold: a player condition (player index,
    allowed actions) or a scenario condition (variable name, required truth value)."""
    for condition, reward in rules:
        if all(
            joint[key] in wanted if isinstance(key, int) else scenario[key] == wanted
            for key, wanted in condition
        ):
            return reward
    raise AnalysisInputError(
        source, field, f"no rule matches {describe()}; end the list with a rule without `when`"
    )


def _describe(players, actions, joint, scenario) -> str:
    parts = [f"{p}={actions[i][a]}" for i, (p, a) in enumerate(zip(players, joint))]
    parts += [f"{k}={'true' if v else 'false'}" for k, v in scenario.items()]
    return ", ".join(parts)


def _positive_int(value, source, field) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AnalysisInputError(source, field, f"expected a positive whole number, got {value!r}")
    return value


def _seeds(value, source) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return tuple(range(_positive_int(value, source, "seeds")))
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        for k, seed in enumerate(value):
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise AnalysisInputError(
                    source, f"seeds[{k}]", f"expected a non-negative whole number, got {seed!r}"
                )
        return tuple(value)
    raise AnalysisInputError(source, "seeds", "expected a count or a list of seeds")
