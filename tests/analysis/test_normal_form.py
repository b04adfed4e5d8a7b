"""Normal-form games: expected payoffs, best responses, NashConv, the Nash check, file loading."""
import itertools

import numpy as np
import pytest

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame, game_from_data, load_game


def _brute_force_payoffs(game, profile):
    """u_i(sigma) by summing over every joint action: the definition, independent of tensordot."""
    total = np.zeros(game.num_players)
    for joint in itertools.product(*(range(k) for k in game.shape)):
        weight = np.prod([profile[i][a] for i, a in enumerate(joint)])
        total += weight * game.payoffs[(slice(None), *joint)]
    return total


def test_expected_and_deviation_payoffs_match_the_definition_for_three_players():
    rng = np.random.default_rng(0)
    game = NormalFormGame.from_tensor(rng.normal(size=(3, 2, 3, 4)))
    profile = tuple(rng.dirichlet(np.ones(k)) for k in game.shape)
    assert np.allclose(game.expected_payoffs(profile), _brute_force_payoffs(game, profile), atol=1e-12)
    for i in range(3):
        for a in range(game.shape[i]):
            pure = list(profile)
            pure[i] = np.eye(game.shape[i])[a]
            assert game.deviation_payoffs(profile, i)[a] == pytest.approx(
                _brute_force_payoffs(game, pure)[i], abs=1e-12
            )


def test_chapter_exploitability_example_0_3_plus_0_1():
    """D-12 can gain 0.3 by deviating and C-9 can gain 0.1, so E = 0.4; repairing D-12's loophole
    alone leaves 0.1."""
    d12 = [[1.0, 1.0], [1.3, 1.3]]      # rows: comply, loophole; columns: report, inflate
    c9 = [[1.0, 1.1], [1.0, 1.1]]
    game = NormalFormGame.from_bimatrix(d12, c9, players=("D-12", "C-9"),
                                        actions=(("comply", "loophole"), ("report", "inflate")))
    convention = game.pure_profile((0, 0))
    assert game.deviation_gains(convention) == pytest.approx([0.3, 0.1], abs=1e-12)
    assert game.nash_conv(convention) == pytest.approx(0.4, abs=1e-12)
    assert not game.is_nash(convention)
    repaired = NormalFormGame.from_bimatrix([[1.0, 1.0], [0.9, 0.9]], c9)
    assert repaired.nash_conv(convention) == pytest.approx(0.1, abs=1e-12)


def test_nash_check_three_beats_two_but_not_four():
    """Current policy pays 3 and the best deviation 2: stable; a deviation paying 4 would not be."""
    stable = NormalFormGame.from_bimatrix([[3, 3], [2, 2]], [[0, 0], [0, 0]])
    unstable = NormalFormGame.from_bimatrix([[3, 3], [4, 4]], [[0, 0], [0, 0]])
    profile = stable.pure_profile((0, 0))
    assert stable.is_nash(profile) and stable.nash_conv(profile) == 0.0
    assert not unstable.is_nash(profile) and unstable.nash_conv(profile) == pytest.approx(1.0)


def test_nash_conv_is_zero_exactly_at_the_mixed_equilibrium_of_matching_pennies():
    game = NormalFormGame.from_bimatrix([[1, -1], [-1, 1]], [[-1, 1], [1, -1]])
    assert game.nash_conv(game.uniform_profile()) == pytest.approx(0.0, abs=1e-15)
    assert game.nash_conv((np.array([0.6, 0.4]), np.array([0.5, 0.5]))) > 0
    assert game.best_responses(game.uniform_profile(), 0) == [0, 1]
    assert game.best_responses((np.array([0.6, 0.4]), np.array([0.5, 0.5])), 1) == [1]


def test_pure_equilibria_of_the_three_reviewer_example(examples):
    game = load_game(examples / "three_reviewers.yaml")
    named = {tuple(game.actions[i][a] for i, a in enumerate(j)) for j in game.pure_nash_equilibria()}
    assert named == {("careful", "careful", "skim"), ("careful", "skim", "careful"),
                     ("skim", "careful", "careful"), ("skim", "skim", "skim")}


def test_both_payoff_layouts_load_to_the_same_tensor(examples):
    cells = load_game(examples / "rock_paper_scissors.yaml")
    per_player = game_from_data({
        "actions": {"row": ["rock", "paper", "scissors"], "column": ["rock", "paper", "scissors"]},
        "payoffs": [[[0, 0], [-1, 1], [1, -1]], [[1, -1], [0, 0], [-1, 1]], [[-1, 1], [1, -1], [0, 0]]]})
    assert np.array_equal(cells.payoffs, per_player.payoffs)
    assert cells.constant_sum() == 0.0
    assert cells.is_symmetric()


def test_profile_in_the_file_is_read_and_audited(examples):
    game = load_game(examples / "drafter_checker.yaml")
    assert np.allclose(game.profile[0], [0.8, 0.2]) and np.allclose(game.profile[1], [0.7, 0.3])
    assert game.nash_conv(game.profile) == pytest.approx(0.22)


def test_json_files_load(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"actions": {"a": ["x", "y"], "b": ["u"]}, "payoffs": [[[1, 2]], [[3, 4]]]}')
    game = load_game(path)
    assert game.shape == (2, 1) and game.payoffs[1, 1, 0] == 4


BAD_GAMES = {
    "wrong tensor shape": (
        "payoffs:\n  - [[1, 2], [3, 4]]\n  - [[1, 2], [3, 4], [5, 6]]\n",
        "payoffs[1]",
        "expected 2",
    ),
    "wrong cell length": (
        "payoffs:\n  - [[1, 2], [3, 4, 5]]\n  - [[1, 2], [3, 4]]\n",
        "payoffs[0][1]",
        "one payoff per player",
    ),
    "non-numeric payoff": (
        "payoffs:\n  - [[1, 2], [3, four]]\n  - [[1, 2], [3, 4]]\n",
        "payoffs[0][1][1]",
        "expected a number",
    ),
    "boolean payoff": (
        "payoffs:\n  - [[1, 2], [3, true]]\n  - [[1, 2], [3, 4]]\n",
        "payoffs[0][1][1]",
        "expected a number",
    ),
    "numeric string": (
        "payoffs:\n  - [[1, 2], [3, '4']]\n  - [[1, 2], [3, 4]]\n",
        "payoffs[0][1][1]",
        "expected a number",
    ),
    "per-player shape": ("payoffs: {a: [[1, 2], [3, 4]], b: [[1, 2]]}\n", "payoffs.b", "expected 2"),
    "unknown payoff player": (
        "payoffs: {a: [[1, 2], [3, 4]], c: [[1, 2], [3, 4]]}\n",
        "payoffs.c",
        "unknown player",
    ),
    "probabilities not summing to one": (
        "payoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\n"
        "profile: {a: {x: 0.5, y: 0.4}, b: [0.5, 0.5]}\n",
        "profile.a",
        "sum to 0.9",
    ),
    "unknown action in profile": (
        "payoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\n"
        "profile: {a: {x: 0.5, z: 0.5}, b: [0.5, 0.5]}\n",
        "profile.a.z",
        "unknown action 'z'",
    ),
    "negative probability": (
        "payoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\nprofile: {a: [1.5, -0.5], b: [0.5, 0.5]}\n",
        "profile.a[0]",
        "[0, 1]",
    ),
    "missing profile player": (
        "payoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\nprofile: {a: [1, 0]}\n",
        "profile.b",
        "missing",
    ),
    "profile length": (
        "payoffs: {a: [[1, 2], [3, 4]], b: [[1, 2], [3, 4]]}\nprofile: {a: [1, 0, 0], b: [1, 0]}\n",
        "profile.a",
        "expected 2",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_GAMES))
def test_bad_game_files_name_the_file_and_the_field(tmp_path, case):
    body, field, words = BAD_GAMES[case]
    path = tmp_path / "bad.yaml"
    path.write_text("actions: {a: [x, y], b: [u, v]}\n" + body)
    with pytest.raises(AnalysisInputError) as caught:
        load_game(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {field}: "), message
    assert words in message
    assert "\n" not in message


def test_duplicate_and_missing_names(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("actions: {a: [x, x], b: [u]}\npayoffs: [[[1, 1]], [[1, 1]]]\n")
    with pytest.raises(AnalysisInputError, match=r"actions.a: duplicate name\(s\) x"):
        load_game(path)
    path.write_text("actions: {a: [x], b: [u]}\n")
    with pytest.raises(AnalysisInputError, match="payoffs: missing"):
        load_game(path)
    with pytest.raises(AnalysisInputError, match="no such file"):
        load_game(tmp_path / "absent.yaml")
    path.write_text("actions: [\n")
    with pytest.raises(AnalysisInputError, match="not valid YAML"):
        load_game(path)
