"""Markov games: the chapter's 2 + 0.5 * 5 = 4.5, exact evaluation and best responses checked
against value iteration, and input errors."""
import itertools

import numpy as np
import pytest

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.markov import load_markov_game, markov_game_from_data


def test_chapter_markov_example_is_4_5(examples):
    game = load_markov_game(examples / "markov_chapter.yaml")
    values = game.evaluate(game.policy)
    assert values["good"][0] == pytest.approx(6.0) and values["fair"][0] == pytest.approx(4.0)
    assert values["task"][0] == pytest.approx(2 + 0.5 * 5)  # 4.5
    audit = game.audit(game.policy)
    assert audit["players"]["worker"]["gain"] == pytest.approx(0.0)


def test_best_response_finds_the_better_action(examples):
    """Taking the shortcut pays 4 and ends the game; proceeding is worth 4.5: a gain of 0.5."""
    game = load_markov_game(examples / "markov_chapter.yaml")
    shortcut = game.policy_from_data({"task": {"worker": {"shortcut": 1.0}}})
    audit = game.audit(shortcut)["players"]["worker"]
    assert audit["value"] == pytest.approx(4.0)
    assert audit["best_response_value"] == pytest.approx(4.5)
    assert audit["gain"] == pytest.approx(0.5)
    assert audit["best_response"]["task"] == "proceed"


def _random_game(rng, states=4, gamma=0.8):
    names = [f"s{k}" for k in range(states)]
    data = {"players": ["a", "b"], "gamma": gamma, "states": {}}
    for s in names:
        acts = {"a": ["x", "y"], "b": ["u", "v", "w"]}
        outcomes = []
        for joint in itertools.product(acts["a"], acts["b"]):
            probs = rng.dirichlet(np.ones(states))
            outcomes.append({"joint": list(joint), "rewards": rng.normal(size=2).tolist(),
                             "next": {n: float(p) for n, p in zip(names, probs)}})
        data["states"][s] = {"actions": acts, "outcomes": outcomes}
    data["policy"] = {
        s: {"a": rng.dirichlet(np.ones(2)).tolist(), "b": rng.dirichlet(np.ones(3)).tolist()} for s in names
    }
    return markov_game_from_data(data)


def _value_iteration(game, policy, player=None, sweeps=200):
    """Bellman backups (0.8^200 < 1e-19: converged); with `player`, that player maximises (its BR)."""
    values = {s: np.zeros(2) for s in game.states}
    for _ in range(sweeps):
        own = {i: np.array([values[s][i] for s in game.states]) for i in range(2)}
        new = {}
        for s in game.decision_states:
            reward, next_states = game._joint_step(s, policy[s])
            v = reward + game.gamma * np.array([next_states @ own[i] for i in range(2)])
            if player is not None:
                v[player] = game.action_values(policy, player, s, own[player]).max()
            new[s] = v
        values = new
    return values


def test_exact_evaluation_and_best_responses_match_value_iteration():
    rng = np.random.default_rng(12)
    for _ in range(3):
        game = _random_game(rng)
        exact = game.evaluate(game.policy)
        iterated = _value_iteration(game, game.policy)
        for s in game.states:
            assert np.allclose(exact[s], iterated[s], atol=1e-10)
        for player in range(2):
            best, _ = game.best_response(game.policy, player)
            reference = _value_iteration(game, game.policy, player)
            for s in game.states:
                assert best[s][player] == pytest.approx(reference[s][player], abs=1e-9)
                assert best[s][player] >= exact[s][player] - 1e-12


BASE = {"players": ["p"], "gamma": 0.5,
        "states": {"s": {"actions": {"p": ["a", "b"]},
                         "outcomes": [{"joint": ["a"], "rewards": [1], "next": {"t": 1.0}},
                                      {"joint": ["b"], "rewards": [0], "next": {"t": 1.0}}]},
                   "t": {"value": [0]}},
        "policy": {"s": {"p": [0.5, 0.5]}}}


def _variant(edit):
    import copy

    data = copy.deepcopy(BASE)
    edit(data)
    return data


BAD = {
    "missing joint action": (
        lambda d: d["states"]["s"]["outcomes"].pop(),
        "states.s.outcomes",
        "no outcome for joint action [b]",
    ),
    "unknown action": (
        lambda d: d["states"]["s"]["outcomes"][1].update(joint=["c"]),
        "states.s.outcomes[1].joint.p",
        "unknown action 'c'",
    ),
    "next not summing to one": (
        lambda d: d["states"]["s"]["outcomes"][0].update(next={"t": 0.7}),
        "states.s.outcomes[0].next",
        "sum to 0.7",
    ),
    "unknown next state": (
        lambda d: d["states"]["s"]["outcomes"][0].update(next={"u": 1.0}),
        "states.s.outcomes[0].next.u",
        "unknown state",
    ),
    "non-numeric reward": (
        lambda d: d["states"]["s"]["outcomes"][0].update(rewards=["one"]),
        "states.s.outcomes[0].rewards[0]",
        "expected a number",
    ),
    "gamma out of range": (lambda d: d.update(gamma=1.5), "gamma", "[0, 1]"),
    "policy not summing to one": (
        lambda d: d["policy"]["s"].update(p=[0.5, 0.6]),
        "policy.s.p",
        "sum to 1.1",
    ),
    "policy missing player": (lambda d: d["policy"].update(s={}), "policy.s.p", "missing"),
    "duplicate joint": (
        lambda d: d["states"]["s"]["outcomes"][1].update(joint=["a"]),
        "states.s.outcomes[1].joint",
        "listed twice",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_markov_games_name_the_field(case):
    edit, field, words = BAD[case]
    with pytest.raises(AnalysisInputError) as caught:
        markov_game_from_data(_variant(edit), "game.yaml")
    assert str(caught.value).startswith(f"game.yaml: {field}: ") and words in str(caught.value)


def test_undiscounted_game_that_never_ends_is_reported():
    data = _variant(lambda d: d.update(gamma=1.0))
    data["states"]["s"]["outcomes"][0]["next"] = {"s": 1.0}
    game = markov_game_from_data(data, "loop.yaml")
    with pytest.raises(AnalysisInputError, match="singular"):
        game.evaluate(game.policy_from_data({"s": {"p": [1.0, 0.0]}}))
