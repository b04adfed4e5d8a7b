"""The lower bound on the adversarial gap of OpenSpiel games of more than two players: never above
the truth (brute force over every pure profile of the other seats, on games small enough), played
as the exploiter pool's BestResponse, and said plainly when it cannot be computed."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

pytest.importorskip("pyspiel")

from sepo.games import load_game  # noqa: E402
from sepo.games.base import Decision  # noqa: E402
from sepo.games.openspiel.bound import lower_bound, seat_weights  # noqa: E402
from sepo.policies.base import Policy  # noqa: E402
from tests.cli.cli_helpers import _error, _run  # noqa: E402

THREE_PLAYER_EFG = """EFG 2 R "three" { "A" "B" "C" }
""
c "deal" 1 "" { "x" 1/2 "y" 1/2 } 0
p "" 1 1 "A:x" { "l" "r" } 0
p "" 2 1 "B:l" { "u" "d" } 0
p "" 3 1 "C" { "a" "b" } 0
t "" 1 "o1" { 3, -1, 2 }
t "" 2 "o2" { 0, 2, -2 }
p "" 3 1 "C" { "a" "b" } 0
t "" 3 "o3" { -1, 1, 1 }
t "" 4 "o4" { 2, 0, -1 }
p "" 2 2 "B:r" { "u" "d" } 0
p "" 3 1 "C" { "a" "b" } 0
t "" 5 "o5" { 1, 1, -3 }
t "" 6 "o6" { -2, 3, 0 }
p "" 3 1 "C" { "a" "b" } 0
t "" 7 "o7" { 0, -1, 2 }
t "" 8 "o8" { 1, 2, 1 }
p "" 1 2 "A:y" { "l" "r" } 0
p "" 2 1 "B:l" { "u" "d" } 0
p "" 3 1 "C" { "a" "b" } 0
t "" 9 "o9" { -1, 0, 2 }
t "" 10 "o10" { 2, -2, 1 }
p "" 3 1 "C" { "a" "b" } 0
t "" 11 "o11" { 1, 1, 1 }
t "" 12 "o12" { 0, 3, -1 }
p "" 2 2 "B:r" { "u" "d" } 0
p "" 3 1 "C" { "a" "b" } 0
t "" 13 "o13" { 2, 2, -2 }
t "" 14 "o14" { -3, 1, 2 }
p "" 3 1 "C" { "a" "b" } 0
t "" 15 "o15" { 1, 0, 0 }
t "" 16 "o16" { 0, 1, 3 }
"""


def _games(tmp_path) -> list[str]:
    """A general-sum three-player game from a file, three-player tiny Hanabi (identical payoffs drawn
    at random: a coordination problem, where a coordinate ascent can stop short) and three-player
    matching pennies (against a uniform agent no single seat gains by deviating; the team does)."""
    efg = tmp_path / "three.efg"
    efg.write_text(THREE_PLAYER_EFG)
    payoff = ";".join(str(int(v)) for v in np.random.default_rng(7).integers(-3, 4, 64))
    return [f"openspiel:efg_game(filename={efg})",
            f"openspiel:tiny_hanabi(num_players=3,num_chance=2,num_actions=2,payoff={payoff})",
            "openspiel:matching_pennies_3p"]


class RandomTable(Policy):
    """A fixed random policy keyed by OpenSpiel's information-state string (seeded)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.name = f"random{seed}"

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        rng = np.random.default_rng([self.seed, sum(map(ord, decision.info_key)), len(decision.info_key)])
        weights = rng.random(len(decision.legal_actions)) ** 2
        return {a: float(w / weights.sum()) for a, w in zip(decision.legal_actions, weights)}


def _tree(state):
    """The game as nested tuples, read once from pyspiel: ('z', returns) | ('c', [(p, child)]) |
    (seat, key, [(action, child)])."""
    if state.is_terminal():
        return ("z", tuple(state.returns()))
    if state.is_chance_node():
        return ("c", [(p, _tree(state.child(a))) for a, p in state.chance_outcomes()])
    seat = state.current_player()
    return (
        seat,
        state.information_state_string(seat),
        [(a, _tree(state.child(a))) for a in state.legal_actions()],
    )


def _keys(node, found):
    if node[0] == "c":
        for _, child in node[1]:
            _keys(child, found)
    elif node[0] != "z":
        found.setdefault(node[0], {})[node[1]] = [a for a, _ in node[2]]
        for _, child in node[2]:
            _keys(child, found)
    return found


def _brute_force_gap(game, agent: Policy) -> float:
    """max over every pure profile of the other seats of E[Σ others − agent], per seat of the
    agent, weighted as the episode rotates it: the truth, by enumeration (no sepo code)."""
    pgame = game.pyspiel_game
    root = _tree(pgame.new_initial_state())
    keys = _keys(root, {})
    players = pgame.num_players()

    def value(node, seat, agent_probs, strategy):
        if node[0] == "z":
            return sum(node[1]) - 2 * node[1][seat]
        if node[0] == "c":
            return sum(p * value(child, seat, agent_probs, strategy) for p, child in node[1])
        if node[0] == seat:
            probs = agent_probs[node[1]]
            return sum(
                probs[a] * value(child, seat, agent_probs, strategy) for a, child in node[2] if probs[a] > 0
            )
        chosen = strategy[node[0]][node[1]]
        return next(value(child, seat, agent_probs, strategy) for a, child in node[2] if a == chosen)

    def probs_at(seat):
        out = {}
        state_of = {}

        def find(state):
            if state.is_terminal():
                return
            if state.is_chance_node():
                for a, _ in state.chance_outcomes():
                    find(state.child(a))
                return
            if state.current_player() == seat:
                state_of.setdefault(state.information_state_string(seat), state.clone())
            for a in state.legal_actions():
                find(state.child(a))

        find(pgame.new_initial_state())
        for key, state in state_of.items():
            legal = tuple(state.legal_actions(seat))
            decision = Decision(game=game.name, player=0, info_key=key, legal_actions=legal,
                                action_names=tuple(str(a) for a in legal), observation={"seat": seat})
            out[key] = agent.action_probabilities(decision)
        return out

    total = 0.0
    for seat, weight in enumerate(seat_weights(players, game.rounds)):
        if weight == 0:
            continue
        agent_probs = probs_at(seat)
        others = [s for s in range(players) if s != seat]
        orders = {s: sorted(keys.get(s, {})) for s in others}
        best = -np.inf
        for picks in itertools.product(
            *[itertools.product(*[keys[s][k] for k in orders[s]]) for s in others]
        ):
            strategy = {s: dict(zip(orders[s], pick)) for s, pick in zip(others, picks)}
            best = max(best, value(root, seat, agent_probs, strategy))
        total += weight * best
    return total


# 3, 5: from mixed starts alone it stopped short on tiny Hanabi
@pytest.mark.parametrize("agent_seed", [None, 1, 3, 5])
def test_the_bound_never_exceeds_the_brute_force_gap(tmp_path, agent_seed):
    from sepo.policies.specs import load_agent

    for name in _games(tmp_path):
        game = load_game(name, rounds=3)
        agent = load_agent("uniform", game) if agent_seed is None else RandomTable(agent_seed)
        audit = lower_bound(game, agent)
        truth = _brute_force_gap(game, agent)
        assert audit.result.value <= truth + 1e-9, (name, agent_seed)
        assert audit.result.exact is False and "lower bound" in audit.result.method
        # not a trivial bound: most of the truth on these games
        assert audit.result.value >= 0.5 * truth - 1e-9
        if "efg_game" in name:
            # one information set each: the ascent finds it
            assert audit.result.value == pytest.approx(truth, abs=1e-9)


def test_the_search_finds_what_the_team_gains_where_no_single_seat_gains():
    """Matching pennies for three against a uniform agent: every one-seat deviation from mixed play
    gains 0, the team's best pure profile leads by 1 (the random pure starts find it)."""
    from sepo.policies.specs import load_agent

    game = load_game("openspiel:matching_pennies_3p", rounds=3)
    assert lower_bound(game, load_agent("uniform", game)).result.value == pytest.approx(1.0, abs=1e-12)


def test_the_bound_is_what_its_profile_earns_in_play():
    """The exploiter pool plays the profile found: its measured lead matches the bound."""
    result = _run(
        "eval",
        "--game",
        "openspiel:kuhn_poker(players=3)",
        "--agent",
        "uniform",
        "--episodes",
        "4000",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["exact_label"] == "lower bound" and report["lower_bound_exact"] is False
    bound = report["adversarial_gap_lower_bound"]
    assert bound == pytest.approx(61 / 48, abs=1e-12)  # uniform in seats 0 and 1 of three-player Kuhn
    low, high = report["ci"]["exploit_pool"]
    assert low <= bound <= high and report["safety"] is not None and np.isfinite(report["safety"])
    assert any("lower-bound search" in note for note in report["notes"])


def test_exploit_reports_the_bound_with_its_search_named():
    result = _run("exploit", "--game", "openspiel:kuhn_poker(players=3)", "--agent", "uniform", "--json")
    assert result.exit_code == 0, result.output
    audit = json.loads(result.stdout)
    assert audit["exact_label"] == "lower bound" and audit["exact"] is False
    assert audit["adversarial_gap"] == pytest.approx(61 / 48, abs=1e-12)
    assert "exact best responses" in audit["method"] and audit["policy"]["read"] == "exact"


def test_where_the_tree_does_not_fit_no_bound_is_claimed(monkeypatch):
    import sepo.limits
    from sepo.games.openspiel.exact import tree_of

    tree_of.cache_clear()
    monkeypatch.setattr(sepo.limits, "memory_budget", lambda: 100_000)
    name = "openspiel:kuhn_poker(players=4)"
    _error(
        _run("exploit", "--game", name, "--agent", "uniform"), "no bound on the adversarial gap is computed"
    )
    result = _run("eval", "--game", name, "--agent", "uniform", "--episodes", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "adversarial_gap_lower_bound" not in report
    notes = " ".join(report["notes"])
    assert "no bound on the adversarial gap is computed" in notes and "BestResponse skipped" in notes
    tree_of.cache_clear()


def test_a_game_too_large_to_walk_is_refused_by_name_saying_no_bound_is_computed():
    """Hearts (about 3e8 histories); its name is printed as written (rich read `:hearts:` as an emoji)."""
    _error(_run("exploit", "--game", "openspiel:hearts", "--agent", "uniform"),
           "openspiel:hearts: more than", "no bound on the adversarial gap is computed")
