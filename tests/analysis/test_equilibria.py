"""Nash enumeration against nashpy, the zero-sum LP, and CE/CCE linear programs."""
import warnings

import nashpy
import numpy as np
import pytest

from sepo.analysis.equilibria import (
    correlated_equilibrium,
    correlation_gaps,
    incentive_constraints,
    nash_equilibria_2p,
    product_distribution,
    solve_zero_sum,
)
from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame, load_game
from tests.analysis.conftest import random_bimatrix

GAMES = 60


def _same_set(ours, reference, tol=1e-8):
    """Every reference equilibrium matches one of ours within tol (max-norm), and vice versa."""
    def close(a, b):
        return max(np.abs(a[0] - b[0]).max(), np.abs(a[1] - b[1]).max()) <= tol
    return (len(ours) == len(reference) and all(any(close(r, o) for o in ours) for r in reference)
            and all(any(close(o, r) for r in reference) for o in ours))


def test_all_nash_equilibria_match_nashpy_on_random_nondegenerate_games():
    """>= 50 random games up to 4x4: the same set of equilibria as nashpy's vertex enumeration.

    Reference is vertex enumeration: nashpy's support_enumeration drops equilibria whose
    indifference solve returns -0.0 or -1e-17 for an off-support action (its test is `prob >= 0`
    with no tolerance), so on random games it misses about one game in ten."""
    rng = np.random.default_rng(2024)
    sizes, total = set(), 0
    for _ in range(GAMES):
        row, column = random_bimatrix(rng)
        ours = nash_equilibria_2p(NormalFormGame.from_bimatrix(row, column))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = [tuple(map(np.asarray, eq)) for eq in nashpy.Game(row, column).vertex_enumeration()]
        assert not ours.degenerate
        assert len(ours.equilibria) % 2 == 1  # non-degenerate games have an odd number of equilibria
        assert _same_set(ours.equilibria, reference)
        sizes.add(row.shape)
        total += len(reference)
    assert (4, 4) in sizes and len(sizes) >= 8
    assert total > GAMES  # some games have several equilibria, so the set comparison bites


def test_enumerated_equilibria_are_nash_and_complete_for_chicken(examples):
    game = load_game(examples / "chicken.yaml")
    result = nash_equilibria_2p(game)
    assert len(result.equilibria) == 3
    for profile in result.equilibria:
        assert game.nash_conv(profile) <= 1e-12
    mixed = [p for p in result.equilibria if 0 < p[0][0] < 1]
    assert np.allclose(mixed[0][0], [1 / 3, 2 / 3]) and np.allclose(mixed[0][1], [1 / 3, 2 / 3])


def test_degenerate_games_are_flagged():
    """A column player indifferent between its actions makes the game degenerate: a continuum."""
    game = NormalFormGame.from_bimatrix([[1, 0], [0, 1]], [[1, 1], [1, 1]])
    assert nash_equilibria_2p(game).degenerate
    # von Stengel (2002)
    textbook = NormalFormGame.from_bimatrix([[3, 3], [2, 5], [0, 6]], [[3, 3], [2, 6], [3, 1]])
    assert nash_equilibria_2p(textbook).degenerate


def test_enumeration_needs_two_players():
    with pytest.raises(AnalysisInputError, match="two players"):
        nash_equilibria_2p(NormalFormGame.from_tensor(np.zeros((3, 2, 2, 2))))


def test_zero_sum_value_and_maximin_strategies():
    rng = np.random.default_rng(5)
    for _ in range(20):
        row, _ = random_bimatrix(rng, 5)
        game = NormalFormGame.from_bimatrix(row, -row)
        solution = solve_zero_sum(game)
        assert game.nash_conv((solution.row_strategy, solution.column_strategy)) <= 1e-8
        assert solution.row_strategy @ row @ solution.column_strategy == pytest.approx(
            solution.value, abs=1e-8
        )
        nash = nash_equilibria_2p(game).equilibria
        assert all(x @ row @ y == pytest.approx(solution.value, abs=1e-8) for x, y in nash)


def test_zero_sum_rock_paper_scissors_and_constant_sum(examples):
    rps = load_game(examples / "rock_paper_scissors.yaml")
    solution = solve_zero_sum(rps)
    assert solution.value == pytest.approx(0.0, abs=1e-12)
    assert np.allclose(solution.row_strategy, 1 / 3) and np.allclose(solution.column_strategy, 1 / 3)
    shifted = NormalFormGame(rps.players, rps.actions, rps.payoffs + np.array([2.0, 3.0])[:, None, None])
    assert shifted.constant_sum() == pytest.approx(5.0)
    assert solve_zero_sum(shifted).value == pytest.approx(2.0, abs=1e-12)
    with pytest.raises(AnalysisInputError, match="not zero-sum"):
        solve_zero_sum(load_game(examples / "chicken.yaml"))


def _constraint_values(game, result):
    constraints, _ = incentive_constraints(game, result.kind)
    return constraints @ result.distribution.ravel()


@pytest.mark.parametrize("kind", ["ce", "cce"])
def test_every_returned_correlated_equilibrium_meets_its_constraints_to_1e_9(kind):
    """Random 2-, 3- and 4-player games with payoffs up to 100 in size, every objective."""
    rng = np.random.default_rng(11)
    worst = 0.0
    for trial in range(40):
        players = 2 + trial % 3
        shape = tuple(rng.integers(2, 4 if players == 4 else 5, size=players))
        game = NormalFormGame.from_tensor(rng.normal(size=(players, *shape)) * rng.choice([1.0, 10.0, 100.0]))
        for objective in ("max-welfare", "min-welfare", "max:p1", f"min:p{players}"):
            result = correlated_equilibrium(game, kind, objective)
            p = result.distribution
            assert p.shape == shape and p.min() >= 0.0 and p.sum() == pytest.approx(1.0, abs=1e-15)
            values = _constraint_values(game, result)
            assert values.max() <= 1e-9
            assert result.max_violation == pytest.approx(max(0.0, values.max()), abs=1e-15)
            worst = max(worst, values.max())
    assert worst <= 1e-9


def test_correlated_equilibria_bracket_the_nash_equilibria_and_ce_is_inside_cce(examples):
    """Every Nash equilibrium is a CE, so max/min CE welfare bracket Nash welfare; every CE is a CCE."""
    rng = np.random.default_rng(3)
    for _ in range(15):
        row, column = random_bimatrix(rng)
        game = NormalFormGame.from_bimatrix(row, column)
        best = correlated_equilibrium(game, "ce", "max-welfare")
        worst = correlated_equilibrium(game, "ce", "min-welfare")
        cce_best = correlated_equilibrium(game, "cce", "max-welfare")
        for profile in nash_equilibria_2p(game).equilibria:
            welfare = game.expected_payoffs(profile).sum()
            assert worst.objective_value - 1e-9 <= welfare <= best.objective_value + 1e-9
        cce_rows, _ = incentive_constraints(game, "cce")
        assert (cce_rows @ best.distribution.ravel()).max() <= 1e-9
        assert cce_best.objective_value >= best.objective_value - 1e-9


def test_chicken_max_welfare_correlated_equilibrium_is_the_traffic_light(examples):
    game = load_game(examples / "chicken.yaml")
    best = correlated_equilibrium(game, "ce", "max-welfare")
    assert best.objective_value == pytest.approx(10.5, abs=1e-9)
    assert np.allclose(best.distribution, [[0.0, 0.25], [0.25, 0.5]], atol=1e-9)
    worst = correlated_equilibrium(game, "ce", "min-welfare")
    assert worst.objective_value == pytest.approx(7.2, abs=1e-9)
    assert best.support(game)[0] == (("yield", "yield"), pytest.approx(0.5))


def test_player_objectives_and_bad_objective(examples):
    game = load_game(examples / "chicken.yaml")
    favour_a = correlated_equilibrium(game, "ce", "max:a")
    assert favour_a.payoffs[0] == pytest.approx(7.0, abs=1e-9)
    with pytest.raises(AnalysisInputError, match="unknown objective"):
        correlated_equilibrium(game, "ce", "best")
    with pytest.raises(AnalysisInputError, match="unknown player"):
        correlated_equilibrium(game, "ce", "max:zed")
    with pytest.raises(AnalysisInputError, match="unknown equilibrium kind"):
        correlated_equilibrium(game, "nash")


def test_gaps_vanish_at_nash_products_and_measure_swaps():
    rng = np.random.default_rng(8)
    row, column = random_bimatrix(rng)
    game = NormalFormGame.from_bimatrix(row, column)
    for profile in nash_equilibria_2p(game).equilibria:
        gaps = correlation_gaps(game, product_distribution(profile))
        assert gaps.ce_gap <= 1e-12 and gaps.cce_gap <= 1e-12
    dilemma = NormalFormGame.from_bimatrix([[3, 0], [5, 1]], [[3, 5], [0, 1]])
    gaps = correlation_gaps(dilemma, product_distribution(dilemma.pure_profile((0, 0))))
    assert gaps.ce == pytest.approx([2.0, 2.0]) and gaps.cce == pytest.approx([2.0, 2.0])
    assert list(gaps.swap_maps[0]) == [1, 1]
