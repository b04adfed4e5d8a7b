"""Learning dynamics: convergence measured by the CE/CCE gaps, cycle detection, plots."""
import numpy as np
import pytest

from sepo.analysis.dynamics import detect_cycle, plot_trajectory, run_dynamics, stationary_distribution
from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame, load_game


@pytest.mark.parametrize("seed", [0, 1])
def test_fictitious_play_on_matching_pennies_reaches_one_half(examples, seed):
    game = load_game(examples / "matching_pennies.yaml")
    trajectory = run_dynamics(game, "fictitious", 10_000, seed=seed)
    assert trajectory.steps[-1] == 10_000
    for average in trajectory.final_average():
        assert np.abs(average - 0.5).max() <= 0.01


def test_replicator_cycles_on_rock_paper_scissors(examples):
    game = load_game(examples / "rock_paper_scissors.yaml")
    trajectory = run_dynamics(game, "replicator", 10_000, dt=0.01, seed=0)
    assert trajectory.cycle.detected
    assert trajectory.cycle.returns >= 3
    # the orbit stays away from the equilibrium: the current strategy never settles at 1/3
    assert np.abs(trajectory.strategies[0][-50:] - 1 / 3).max() > 0.05


def test_replicator_converges_to_a_strict_equilibrium():
    """Prisoner's dilemma: defection strictly dominates, every interior orbit goes to it."""
    game = NormalFormGame.from_bimatrix([[3, 0], [5, 1]], [[3, 5], [0, 1]])
    trajectory = run_dynamics(game, "replicator", 4_000, dt=0.01, seed=1)
    assert not trajectory.cycle.detected
    assert trajectory.cycle.verdict == "converged"
    assert trajectory.strategies[0][-1][1] > 0.999


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regret_matching_on_a_random_3x3_game_reaches_a_cce(seed):
    game = NormalFormGame.from_tensor(np.random.default_rng(seed).uniform(size=(2, 3, 3)))
    trajectory = run_dynamics(game, "regret-matching", 10_000)
    assert trajectory.cce_gap[-1] <= 0.01
    assert trajectory.cce_gap[-1] < trajectory.cce_gap[0]


def test_swap_regret_matching_closes_the_ce_gap():
    game = NormalFormGame.from_tensor(np.random.default_rng(7).uniform(size=(2, 3, 3)))
    trajectory = run_dynamics(game, "regret-matching", 5_000, swap=True)
    assert trajectory.ce_gap[-1] <= 0.01
    assert trajectory.cce_gap[-1] <= trajectory.ce_gap[-1] + 1e-12


def test_hedge_regret_is_within_its_bound():
    """Hedge with eta = sqrt(8 ln k / T) / range has average regret <= range * sqrt(ln k / (2T))."""
    game = NormalFormGame.from_tensor(np.random.default_rng(9).uniform(size=(2, 3, 3)))
    iterations = 4_000
    trajectory = run_dynamics(game, "hedge", iterations)
    spread = max(np.ptp(game.payoffs[0]), np.ptp(game.payoffs[1]))
    assert trajectory.cce_gap[-1] <= spread * np.sqrt(np.log(3) / (2 * iterations))


def test_three_player_regret_matching():
    game = NormalFormGame.from_tensor(np.random.default_rng(3).normal(size=(3, 2, 2, 2)))
    trajectory = run_dynamics(game, "regret-matching", 3_000)
    assert trajectory.cce_gap[-1] <= 0.05
    assert trajectory.average_joint.shape == (2, 2, 2)


def test_detect_cycle_on_synthetic_paths():
    t = np.linspace(0, 20 * np.pi, 4_000)
    circle = np.stack([np.cos(t), np.sin(t)], axis=1)
    cycle = detect_cycle(circle, step=t[1] - t[0])
    assert cycle.detected and cycle.period == pytest.approx(2 * np.pi, rel=0.02)
    assert detect_cycle(np.ones((100, 3))).verdict == "converged"
    spiral_out = np.stack([t * np.cos(t), t * np.sin(t)], axis=1)
    assert not detect_cycle(spiral_out).detected


def test_stationary_distribution():
    transition = np.array([[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.0, 0.5, 0.5]])
    x = stationary_distribution(transition)
    assert np.allclose(x @ transition, x) and x.sum() == pytest.approx(1.0)


def test_plot_writes_a_png(tmp_path, examples):
    game = load_game(examples / "rock_paper_scissors.yaml")
    trajectory = run_dynamics(game, "hedge", 500)
    path = plot_trajectory(game, trajectory, tmp_path / "plots" / "rps.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_rules_and_parameters(examples):
    game = load_game(examples / "chicken.yaml")
    with pytest.raises(AnalysisInputError, match="unknown rule 'gradient'"):
        run_dynamics(game, "gradient")
    with pytest.raises(AnalysisInputError, match="swap-regret version"):
        run_dynamics(game, "fictitious", swap=True)
    with pytest.raises(AnalysisInputError, match="at least 1"):
        run_dynamics(game, "hedge", 0)


def test_same_seed_same_trajectory(examples):
    game = load_game(examples / "matching_pennies.yaml")
    first = run_dynamics(game, "fictitious", 500, seed=3)
    second = run_dynamics(game, "fictitious", 500, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(first.averages, second.averages))
