"""Population analysis: exact Kuhn meta-games, the Nash mix, exploitability in the population,
diversity and monoculture, sampled play, and matrix files."""
import numpy as np
import pytest

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.population import (
    MetaGame,
    analyze_population,
    build_meta_game,
    load_matrix,
    max_entropy_maximin,
)

AGENTS = ["nash", "uniform", "bot:AlwaysBet", "bot:AlwaysPass", "bot:LooseAggressive", "bot:TightPassive"]


def test_exact_kuhn_meta_game_is_antisymmetric_and_nash_is_unexploitable():
    meta = build_meta_game("kuhn", AGENTS)
    assert meta.method.startswith("exact")
    assert np.allclose(meta.payoffs, -meta.payoffs.T, atol=1e-15)
    report = analyze_population(meta)
    nash = AGENTS.index("nash")
    assert report.exploitability[nash] == pytest.approx(0.0, abs=1e-12)
    assert report.best_exploiter[nash] is None
    # AlwaysPass never bets, so AlwaysBet wins every pot it opens: one chip per hand
    assert meta.payoffs[AGENTS.index("bot:AlwaysBet"), AGENTS.index("bot:AlwaysPass")] == pytest.approx(1.0)
    assert report.exploitability[AGENTS.index("bot:AlwaysPass")] == pytest.approx(1.0)
    assert report.nash_value == pytest.approx(0.0, abs=1e-12)


def test_the_nash_mix_is_an_equilibrium_of_the_meta_game():
    report = analyze_population(build_meta_game("kuhn", AGENTS))
    mix = report.mix
    game = report.meta.game()
    assert game.nash_conv((mix, mix)) <= 1e-9
    assert mix.sum() == pytest.approx(1.0)
    # nash and TightPassive are both unbeaten here, so the maximum-entropy mix splits evenly
    assert mix[AGENTS.index("nash")] == pytest.approx(0.5, abs=1e-6)
    assert mix[AGENTS.index("bot:TightPassive")] == pytest.approx(0.5, abs=1e-6)
    assert report.diversity()["effective_strategies"] == pytest.approx(2.0, abs=1e-5)


def test_rock_paper_scissors_population_is_diverse(examples):
    report = analyze_population(load_matrix(examples / "population_matrix.yaml"))
    assert np.allclose(report.mix, [1 / 3, 1 / 3, 1 / 3, 0.0], atol=1e-6)
    diversity = report.diversity()
    assert diversity["entropy_nats"] == pytest.approx(np.log(3), abs=1e-5)
    assert not diversity["monoculture"]
    assert report.exploitability[:3] == pytest.approx([0.4, 0.4, 0.4])


def test_a_dominant_agent_is_flagged_as_monoculture():
    payoffs = np.array([[0.0, 0.5, 0.7], [-0.5, 0.0, 0.1], [-0.7, -0.1, 0.0]])
    report = analyze_population(MetaGame(("champion", "b", "c"), payoffs, "test"))
    diversity = report.diversity()
    assert diversity["monoculture"] and diversity["most_common"] == "champion"
    assert diversity["largest_share"] == pytest.approx(1.0)


def test_general_sum_meta_game_uses_symmetric_equilibria():
    """A coordination meta-game: two pure symmetric equilibria and a mixed one; the mixed one is
    the most diverse."""
    payoffs = np.array([[2.0, 0.0], [0.0, 1.0]])
    report = analyze_population(MetaGame(("a", "b"), payoffs, "test"))
    assert len(report.nash_mixes) == 3
    assert np.allclose(report.mix, [1 / 3, 2 / 3])
    assert report.correlated.objective_value == pytest.approx(4.0, abs=1e-9)


def test_max_entropy_maximin_is_unique_on_random_antisymmetric_games():
    rng = np.random.default_rng(6)
    for _ in range(10):
        a = rng.normal(size=(6, 6))
        payoffs = a - a.T
        mix = max_entropy_maximin(payoffs, 0.0)
        assert (mix @ payoffs).min() >= -1e-9


def test_sampled_payoffs_agree_with_exact_ones():
    """The sampled path (used where no exact payoffs exist) estimates the exact matrix."""
    from sepo.analysis.population import _sampled_meta_game
    from sepo.games import load_game
    from sepo.policies.specs import load_agent

    specs = ("nash", "bot:AlwaysBet", "uniform")
    domain = load_game("kuhn")
    sampled = _sampled_meta_game(domain, specs, [load_agent(s, domain) for s in specs], episodes=60, seed=1)
    exact = build_meta_game("kuhn", list(specs)).payoffs
    assert np.all(np.abs(sampled.payoffs - exact) <= 4 * sampled.standard_errors + 1e-9)
    assert np.allclose(sampled.payoffs, -sampled.payoffs.T)  # same episodes for P[i, j] and P[j, i]
    assert sampled.is_zero_sum()
    again = _sampled_meta_game(domain, specs, [load_agent(s, domain) for s in specs], episodes=60, seed=1)
    assert np.array_equal(sampled.payoffs, again.payoffs)


def test_bad_population_inputs(tmp_path):
    with pytest.raises(AnalysisInputError, match="--agents: bot:Nope: unknown bot"):
        build_meta_game("kuhn", ["nash", "bot:Nope"])
    with pytest.raises(AnalysisInputError, match="--game: chess: unknown game"):
        build_meta_game("chess", ["nash", "uniform"])
    with pytest.raises(AnalysisInputError, match="at least two agents"):
        build_meta_game("kuhn", ["nash"])
    path = tmp_path / "m.yaml"
    path.write_text("agents: [a, b]\npayoffs: [[0, 1], [-1]]\n")
    with pytest.raises(AnalysisInputError, match=r"m.yaml: payoffs\[1\]: has 1 entries; expected 2"):
        load_matrix(path)


def test_an_openspiel_population_is_exact_from_the_solvers_head_to_head():
    """Every OpenSpiel game's population broadcast [k, 1] tables against [1, k] (a ValueError)."""
    pytest.importorskip("pyspiel")
    from sepo.games import load_game
    from sepo.metrics.exact import action_table, solver_for
    from sepo.policies.specs import load_agent

    specs = ["uniform", "bot:CFR(iterations=5)", "bot:CFRPlus(iterations=3)"]
    meta = build_meta_game("openspiel:kuhn_poker", specs)
    assert meta.method.startswith("exact") and meta.payoffs.shape == (3, 3)
    assert np.allclose(meta.payoffs, -meta.payoffs.T, atol=1e-12)
    game = load_game("openspiel:kuhn_poker")
    solver = solver_for(game)
    tables = [action_table(load_agent(spec, game), solver.decisions()) for spec in specs]
    assert meta.payoffs[0, 1] == pytest.approx(float(solver.head_to_head(tables[0], tables[1])), abs=1e-12)
    assert meta.payoffs[0, 1] < 0  # uniform loses to CFR's average policy
