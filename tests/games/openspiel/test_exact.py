"""The OpenSpiel domain's exact solver against OpenSpiel's own exploitability, and against sepo's
own Kuhn domain (to 1e-9 and 1e-12)."""
from __future__ import annotations

import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel")

from open_spiel.python.algorithms import exploitability as os_exploitability  # noqa: E402

from sepo.games import get_domain  # noqa: E402
from sepo.games.kuhn import exact as kuhn_exact  # noqa: E402
from sepo.games.kuhn.bots import BOTS  # noqa: E402
from sepo.games.kuhn.rules import INFO_STATES  # noqa: E402
from sepo.games.openspiel.bots import average_policy  # noqa: E402
from sepo.games.openspiel.exact import OpenSpielSolver, to_pyspiel_policy  # noqa: E402
from sepo.metrics.exact import action_table, solver_for, uniform_table  # noqa: E402


def _solver(name: str) -> OpenSpielSolver:
    return solver_for(get_domain(name).game())


def _random_tables(solver, count, seed):
    rng = np.random.default_rng(seed)
    legal = solver.tree.legal
    tables = rng.dirichlet(np.ones(legal.shape[1]), size=(count, len(legal))) * legal
    return tables / tables.sum(-1, keepdims=True)


def _theirs(solver, table) -> float:
    return os_exploitability.exploitability(solver.game.pyspiel_game, to_pyspiel_policy(solver, table))


def test_leduc_exploitability_equals_openspiels():
    solver = _solver("openspiel:leduc_poker")
    assert len(solver.keys) == 936 and solver.value_name == "exploitability"
    cfr = action_table(
        get_domain("openspiel:leduc_poker").build_bot("CFR", {"iterations": 10}), solver.decisions()
    )
    tables = {
        "uniform": uniform_table(solver.decisions()),
        "CFR(10)": cfr,
        "random": _random_tables(solver, 1, 0)[0],
    }
    for label, table in tables.items():
        result = solver.evaluate(table)
        assert result.value == pytest.approx(_theirs(solver, table), abs=1e-9), label
        assert result.br_payoff == pytest.approx(
            result.value, abs=1e-12
        ) and result.agent_payoff == pytest.approx(-result.value)
    assert solver.evaluate(tables["uniform"]).value == pytest.approx(2.373611111111111, abs=1e-12)


def test_a_batch_gives_each_tables_own_value():
    solver = _solver("openspiel:leduc_poker")
    tables = _random_tables(solver, 5, 1)
    batched = solver.values(tables)
    assert np.allclose(batched, [solver.evaluate(t).value for t in tables], atol=1e-12)
    assert batched[2] == pytest.approx(_theirs(solver, tables[2]), abs=1e-9)


def test_cfr_bot_is_openspiels_average_policy():
    policy = average_policy("kuhn_poker", "CFR", 50)
    cpp = pyspiel.CFRSolver(pyspiel.load_game("kuhn_poker"))
    for _ in range(50):
        cpp.evaluate_and_update_policy()
    solver = _solver("openspiel:kuhn_poker")
    bot = get_domain("openspiel:kuhn_poker").build_bot("CFR", {"iterations": 50})
    value = solver.evaluate(action_table(bot, solver.decisions())).value
    assert value == pytest.approx(
        pyspiel.exploitability(pyspiel.load_game("kuhn_poker"), cpp.average_policy()), abs=1e-9
    )
    assert set(policy) == set(solver.keys)


def test_openspiel_kuhn_gives_sepos_kuhn_exploitability():
    """The same information-state keys: a sepo Kuhn table maps row by row onto OpenSpiel's."""
    solver = _solver("openspiel:kuhn_poker")
    order = [INFO_STATES.index(key) for key in solver.keys]
    kuhn_tables = [bot().table for bot in BOTS.values()]
    kuhn_tables += list(np.random.default_rng(2).dirichlet(np.ones(2), size=(20, 12)))
    for table in kuhn_tables:
        assert solver.evaluate(table[order]).value == pytest.approx(
            float(kuhn_exact.exploitability(table)), abs=1e-12
        )
    both = np.stack([t[order] for t in kuhn_tables])
    assert np.allclose(solver.values(both), kuhn_exact.exploitability(np.stack(kuhn_tables)), atol=1e-12)


def test_gradient_is_the_derivative_of_exploitability():
    solver = _solver("openspiel:leduc_poker")
    table = _random_tables(solver, 1, 3)[0]
    legal = solver.tree.legal
    direction = np.where(legal, np.random.default_rng(4).normal(size=table.shape), 0.0)
    direction -= legal * direction.sum(1, keepdims=True) / legal.sum(1, keepdims=True)
    eps = 1e-6
    numeric = (
        solver.evaluate(table + eps * direction).value - solver.evaluate(table - eps * direction).value
    ) / (2 * eps)
    assert numeric == pytest.approx(float((solver.gradient(table) * direction).sum()), abs=1e-6)


@pytest.mark.parametrize(
    "name", ["openspiel:liars_dice(dice_sides=4)", "openspiel:goofspiel(num_cards=3,imp_info=True)"]
)
def test_more_games_by_name_alone(name):
    solver = _solver(name)
    for table in [uniform_table(solver.decisions()), _random_tables(solver, 1, 5)[0]]:
        assert solver.evaluate(table).value == pytest.approx(_theirs(solver, table), abs=1e-9)


def test_a_string_that_forgets_own_moves_has_no_exact_solver():
    """Goofspiel with public bids writes hands, not the order of one's own bids: no perfect recall."""
    from sepo.metrics.exact import NoExactSolver, exact_solver

    with pytest.raises(NoExactSolver, match="perfect recall"):
        exact_solver(get_domain("openspiel:goofspiel(num_cards=4)").game())


def test_a_game_too_large_to_enumerate_is_refused_from_its_estimate():
    """Bargaining's 1,000 instances and ten offers: about 1e17 histories, refused before the walk."""
    from sepo.metrics.exact import NoExactSolver, exact_solver

    with pytest.raises(NoExactSolver, match="estimated from random paths"):
        exact_solver(get_domain("openspiel:bargaining").game())


@pytest.mark.slow
def test_liars_dice_by_its_name_alone_matches_openspiels_cpp():
    """The default game (one six-sided die each; 24,576 information states, 294,883 histories):
    about 4 s of CPU to enumerate, 4 s for each of OpenSpiel's C++ evaluations."""
    solver = _solver("openspiel:liars_dice")
    assert len(solver.keys) == 24_576
    for table in [uniform_table(solver.decisions()), _random_tables(solver, 1, 6)[0]]:
        policy = pyspiel.TabularPolicy(
            {
                key: [(int(a), float(table[r, c])) for c, a in enumerate(solver.tree.actions[r])]
                for r, key in enumerate(solver.keys)
            }
        )
        assert solver.evaluate(table).value == pytest.approx(
            pyspiel.exploitability(solver.game.pyspiel_game, policy), abs=1e-9
        )


def test_general_sum_ties_go_to_the_maximiser_that_leaves_the_agent_least(tmp_path):
    """A 2x2 game paying (2, 2) when both play the first move and 0 otherwise: against an agent
    that plays it with probability 0.7 either reply leads by 0, and the rule takes the second,
    which leaves the agent 0 rather than 1.4."""
    game_file = tmp_path / "tie.nfg"
    game_file.write_text('NFG 1 R "tie" { "P1" "P2" } { 2 2 }\n\n2 2 0 0 0 0 0 0\n')
    solver = _solver(f"openspiel:nfg_game(filename={game_file})")
    assert solver.value_name == "adversarial_gap"
    table = np.array([[0.7, 0.3]] * len(solver.keys))
    result = solver.evaluate(table)
    assert result.value == pytest.approx(0.0, abs=1e-12)
    assert result.agent_payoff == pytest.approx(0.0, abs=1e-12) and result.br_payoff == pytest.approx(
        0.0, abs=1e-12
    )


def test_a_game_with_a_huge_chance_node_is_refused_from_its_declared_sizes():
    """A billion-sided die: listing one roll's outcomes ran pyspiel out of memory inside the size
    estimate itself (std::bad_alloc); the declared sizes refuse it before any state is made."""
    from sepo.games.openspiel.rules import load
    from sepo.games.openspiel.tree import NoTree, check_walkable

    with pytest.raises(NoTree, match="up to 2,000,000,001 outcomes"):
        check_walkable(
            load("liars_dice(dice_sides=1000000000)"), "openspiel:liars_dice(dice_sides=1000000000)"
        )


def test_a_refused_tree_states_the_threshold_its_estimate_crossed_not_a_partial_sum():
    """goofspiel with 13 cards has about 1e29 histories; the estimate stops once past ten times
    the walk limit, so the refusal can only say the tree is larger than that threshold."""
    from sepo.games.openspiel.rules import load
    from sepo.games.openspiel.tree import NoTree, check_walkable

    with pytest.raises(NoTree) as refused:
        check_walkable(load("goofspiel(num_cards=13)"), "goofspiel", max_histories=1000)
    assert str(refused.value) == (
        "goofspiel: more than 10,000 histories (estimated from random paths), past the 1,000 "
        "the exact solver walks"
    )


def test_a_game_where_nobody_can_move_is_one_line():
    from tests.cli.cli_helpers import _error, _run

    _error(
        _run("exploit", "--game", "openspiel:goofspiel(num_cards=0)", "--agent", "uniform"),
        "no player ever moves",
    )


def test_a_long_wide_game_is_refused_without_walking_its_paths():
    """goofspiel with 100,000 cards: 200 random paths of 200,000 moves ran for minutes before the
    estimate stopped as soon as it passed the limit; its episodes are refused from their size."""
    from sepo.games.openspiel.rules import load
    from sepo.games.openspiel.tree import NoTree, check_walkable, estimated_histories
    from tests.cli.cli_helpers import _error, _run

    game = load("goofspiel(num_cards=100000)")
    assert estimated_histories(game, stop_above=1e9) > 1e9
    with pytest.raises(NoTree, match="estimated from random paths"):
        check_walkable(game, "goofspiel")
    _error(
        _run(
            "eval", "--game", "openspiel:goofspiel(num_cards=100000)", "--agent", "uniform", "--episodes", "2"
        ),
        "of episode records",
        "use a shorter game",
    )


def test_episode_size_grows_with_actions_and_length():
    from sepo.games import load_game

    small, large = (
        load_game("openspiel:goofspiel(num_cards=6)"),
        load_game("openspiel:goofspiel(num_cards=60)"),
    )
    assert 10_000 < small.episode_bytes() < large.episode_bytes() < 10_000_000
