"""The IPD's exact solver: the paper's values, Axelrod agents, memory states, the playing best response, pruning."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.ipd.bots import BOTS
from sepo.games.ipd.exact import IPDSolver
from sepo.metrics.exact import action_table, solver_for
from sepo.policies.tabular import TabularPolicy


@pytest.fixture(scope="module")
def solver():
    return IPDSolver(load_game("ipd", "paper"))


@pytest.mark.parametrize("bot, gap, br", [("AlwaysDefect", 0.0, 1.0), ("AlwaysCooperate", 5.0, 5.0), ("TFT", 0.625, 3.25),
                                          ("GrimTrigger", 0.625, 3.25), ("AlternatingDefect", 2.5, 3.0)])
def test_paper_values_eight_rounds(solver, bot, gap, br):
    result = solver.evaluate(action_table(BOTS[bot](), solver.decisions()))
    assert result.value == pytest.approx(gap, abs=1e-12) and result.br_payoff == pytest.approx(br, abs=1e-12)
    assert result.exact and result.pruning_bound == 0.0


def test_generous_tft_gap(solver):
    # always defecting: 5 in round 1, then GTFT still cooperates with probability 1/4: 1/4 · 5 per round
    result = solver.evaluate(action_table(BOTS["GenerousTFT"](), solver.decisions()))
    assert result.value == pytest.approx((5 + 7 * 1.25) / 8, abs=1e-12)


def test_axelrod_agents_read_exactly():
    pytest.importorskip("axelrod")
    from sepo.games.ipd.axelrod_bots import AxelrodPlayer

    solver = IPDSolver(load_game("ipd", rounds=5))
    ours = solver.evaluate(action_table(BOTS["TFT"](), solver.decisions()))
    theirs = solver.evaluate(action_table(AxelrodPlayer("TitForTat"), solver.decisions()))
    assert theirs.value == ours.value and theirs.br_payoff == ours.br_payoff
    stochastic = solver.evaluate(action_table(AxelrodPlayer("GTFT", p=0.25), solver.decisions()))
    assert stochastic.value == pytest.approx(solver.evaluate(action_table(BOTS["GenerousTFT"](), solver.decisions())).value)
    with pytest.raises(SepoError, match="cannot be read exactly"):
        action_table(AxelrodPlayer("ForgetfulFoolMeOnce"), solver.decisions())


def test_memory_states_agree_with_the_full_tree_for_memory_policies():
    full, short = IPDSolver(load_game("ipd")), IPDSolver(load_game("ipd", memory=2))
    rng = np.random.default_rng(0)
    table = rng.dirichlet([1, 1], size=len(short.keys))
    memory_policy = TabularPolicy(table, short.keys)
    long_table = np.array([memory_policy.table[short.keys.index(_last2(d.info_key))] for d in full.decisions()])
    a, b = short.evaluate(table), full.evaluate(long_table)
    assert a.value == pytest.approx(b.value, abs=1e-12) and a.br_payoff == pytest.approx(b.br_payoff, abs=1e-12)
    grad_short = short.gradient(table)
    grad_full = full.gradient(long_table)
    rows = np.array([short.keys.index(_last2(d.info_key)) for d in full.decisions()])
    summed = np.zeros_like(grad_short)
    np.add.at(summed, rows, grad_full)
    assert np.allclose(summed, grad_short, atol=1e-12)


def _last2(key):
    return key if key == "start" else ",".join(key.split(",")[-2:])


def test_best_response_plays_and_earns_the_gap():
    game = load_game("ipd")
    solver = solver_for(game)
    for bot in ("TFT", "GrimTrigger", "AlternatingDefect"):
        table = action_table(BOTS[bot](), solver.decisions())
        result = solver.evaluate(table)
        episode = play_episodes(game, BOTS[bot](), [solver.best_response(table)], [0], agent_seed=0)[0]
        gap = (episode.opponent_payoffs.sum() - episode.agent_payoffs.sum()) / game.rounds
        assert gap == pytest.approx(result.value, abs=1e-12)


def test_pruned_reading_reads_fewer_prompts_within_its_bound():
    game = load_game("ipd", rounds=6)
    solver = IPDSolver(game)
    rng = np.random.default_rng(1)
    table = np.clip(rng.dirichlet([0.3, 0.3], size=len(solver.keys)), 0.0, 1.0)
    agent = TabularPolicy(table, solver.keys)
    calls = []
    original = agent.batch_action_probabilities
    agent.batch_action_probabilities = lambda decisions: calls.append(len(decisions)) or original(decisions)
    exact = solver.evaluate(table)
    pruned, response = solver.evaluate_agent(agent, threshold=0.02)
    assert len(calls) == game.rounds and sum(calls) < len(solver.keys)
    assert 0 < pruned.pruning_bound and abs(pruned.value - exact.value) <= pruned.pruning_bound
    assert not pruned.exact and "pruned" in pruned.method and response.to_json()


def test_best_response_table_reads_as_rounds_histories_and_moves():
    game = load_game("ipd", rounds=3)
    solver = IPDSolver(game)
    rows = solver.best_response(action_table(BOTS["TFT"](), solver.decisions())).to_json()
    assert len(rows) == 1 + 4 + 16
    by_key = {(r["round"], r["history"]): r["action"] for r in rows}
    assert all(by_key[(3, history)] == "D" for (r, history) in by_key if r == 3)  # the last round: always defect
    assert set(by_key.values()) <= {"C", "D"}
