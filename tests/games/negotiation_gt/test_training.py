"""The tabular training environment: the per-deal gap is exact where the values are fixed (the DP
over the opponent's observations agrees) and brackets the DP's exact gap otherwise, its gradient
is the derivative, the exact utility is what play earns, and a trained table plays in evaluation."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import load_game
from sepo.games.negotiation_gt.deals import DealSolver
from sepo.games.negotiation_gt.exact import DPSearch
from sepo.games.negotiation_gt.training import NegotiationGTTrainingEnvironment as environment
from sepo.opponents.pools import parse_bot
from sepo.policies.tabular import TabularPolicy

TRAIN = ("FairNeg", "TFTNeg", "ConcedeNeg")


def _env(bots=TRAIN, **params):
    game = load_game("negotiation-gt", memory=0, **params)
    specs = [parse_bot("negotiation-gt", b) for b in bots]
    return environment(game, specs, specs[:1])


def _random_table(env, seed):
    rng = np.random.default_rng(seed)
    table = np.where(env.legal, rng.gamma(0.5, size=env.legal.shape), 0.0)
    return table / table.sum(1, keepdims=True)


def _dp_gap(env, table):
    search = DPSearch(env.game, 0)
    search.expand(TabularPolicy(table, env.keys))
    return search.solve()["gap"]


def test_fixed_deal_gap_equals_the_dp():
    env = _env(items="2,1,2", values="4,3,3")
    table = _random_table(env, 0)
    result = env.solver.evaluate(table)
    assert result.exact and result.value == pytest.approx(_dp_gap(env, table), abs=1e-9)


def test_random_values_gap_brackets_the_exact_gap_of_the_dp():
    """Upper: an opponent told the agent's values; lower: one that best-responds to the prior.
    The DP (posterior over the values after each demand) is the exact gap in between."""
    env = _env(items="1,1,2", rounds=2)
    table = _random_table(env, 1)
    result = env.solver.evaluate(table)
    exact = _dp_gap(env, table)
    assert not result.exact
    assert result.extra["gap_lower_bound"] - 1e-9 <= exact <= result.value + 1e-9
    assert result.extra["gap_lower_bound"] < result.value


def test_gradient_is_the_derivative_of_the_gap():
    env = _env(items="2,2,1")
    table = _random_table(env, 2)
    direction = np.where(env.legal, np.random.default_rng(3).normal(size=table.shape), 0.0)
    direction -= np.where(env.legal, direction.sum(1, keepdims=True) / env.legal.sum(1, keepdims=True), 0.0)
    value = lambda t: env.solver.evaluate(t).value  # noqa: E731
    numeric = (value(table + 1e-7 * direction) - value(table - 1e-7 * direction)) / 2e-7
    assert numeric == pytest.approx(float((env.solver.gradient(table) * direction).sum()), abs=1e-6)


def test_the_prior_maximiser_earns_the_lower_bound_in_play():
    from sepo.evaluation.play import play_episodes

    env = _env(items="1,2,1", rounds=2)
    table = _random_table(env, 4)
    result = env.solver.evaluate(table)
    opponent = env.solver.best_response(table)
    played = play_episodes(
        env.game, TabularPolicy(table, env.keys), [opponent] * 3000, list(range(3000)), agent_seed=5
    )
    gaps = np.array([(e.opponent_payoffs - e.agent_payoffs).mean() for e in played])
    assert gaps.mean() == pytest.approx(
        result.extra["gap_lower_bound"], abs=4 * gaps.std() / np.sqrt(len(gaps))
    )


@pytest.mark.parametrize("params", [{"items": "2,1,2"}, {"pool_max": 2}])
def test_exact_utility_is_what_play_against_the_train_pool_earns(params):
    from sepo.evaluation.play import play_episodes

    env = _env(**params)
    table = _random_table(env, 6)
    agent = TabularPolicy(table, env.keys)
    means = []
    for spec in env.specs:
        played = play_episodes(
            env.game, agent, [spec.build(env.game) for _ in range(1500)], list(range(1500)), agent_seed=7
        )
        means.append(np.array([e.agent_payoffs.mean() for e in played]))
    sampled = np.mean([m.mean() for m in means])
    error = np.sqrt(sum(m.var() / len(m) for m in means)) / len(means)
    assert env.utility(table) == pytest.approx(sampled, abs=4 * error)


def test_rollouts_follow_the_rules_and_the_events():
    env = _env(items="2,2,3", values="4,3,3")
    table = _random_table(env, 8)
    rollouts = env.rollouts(table, 64, 4, np.random.default_rng(9))
    assert rollouts.states.shape == (256, 4) and rollouts.mask.all()
    assert np.all(rollouts.states == np.arange(4)[None, :])  # one deal: row = round
    assert env.legal[rollouts.states, rollouts.actions].all()
    assert 0 <= rollouts.externality.min() and rollouts.externality.max() <= 1
    assert not rollouts.collusion.any()  # rigorous, no third party: collusion does not apply
    reach = env.training_reach(table)
    assert reach.shape == (4,) and np.allclose(reach, 1.0)


def test_the_tabular_trainer_lowers_the_gap_and_its_table_plays(tmp_path):
    from sepo.evaluation.play import play_episodes
    from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer, load_run_policy

    config = TabularSEPOConfig(
        game="negotiation-gt",
        game_params={"memory": 0, "items": "2,1,2", "values": "4,3,3"},
        lambda_e=5.0,
        steps=40,
        groups=16,
        group_size=4,
        learning_rate=0.1,
        seed=0,
    )
    summary = TabularSEPOTrainer(config, tmp_path / "run").train()
    env = _env(items="2,1,2", values="4,3,3")
    uniform = np.where(env.legal, 1.0, 0.0) / env.legal.sum(1, keepdims=True)
    assert summary["adversarial_gap"] < 0.8 * env.solver.evaluate(uniform).value
    policy = load_run_policy(tmp_path / "run")
    played = play_episodes(
        env.game, policy, [parse_bot("negotiation-gt", "FairNeg").build(env.game)], [0], agent_seed=0
    )
    assert len(played[0].rounds) == 4


def test_tabular_training_needs_memory_zero_and_bots_it_can_read():
    specs = [parse_bot("negotiation-gt", "FairNeg")]
    with pytest.raises(SepoError, match="--memory 0"):
        environment(load_game("negotiation-gt"), specs, [])
    with pytest.raises(SepoError, match="reads more"):
        _env(bots=("Adaptive",), items="1,1,1")


def test_deal_solver_rows_cover_every_deal():
    game = load_game("negotiation-gt", memory=0)
    solver = DealSolver(game)
    assert solver.rows == 64 * 36 * 4 and solver.width == 125
    assert sum(p for _, _, p in solver.deals) == pytest.approx(1.0)
    keys = [d.info_key for d in solver.decisions()[:4]]
    assert len(set(keys)) == 4 and keys[0].endswith("last0:-")


def test_the_trained_value_says_whether_it_is_exact_or_an_upper_bound():
    fixed, drawn = _env(items="2,1,2", values="4,3,3", rounds=2), _env(items="2,1,2", rounds=2)
    assert fixed.exact_metrics(_random_table(fixed, 0))["value_exact"] == 1.0
    metrics = drawn.exact_metrics(_random_table(drawn, 0))
    assert (metrics["value_exact"], metrics["value_upper_bound"]) == (0.0, 1.0)
    assert metrics["gap_lower_bound"] <= metrics["adversarial_gap"]


def test_the_payoff_maximiser_leaves_the_agent_least_among_its_ties():
    """One tie rule everywhere: an agent that demands every item breaks down with any
    demand but nothing, so every demand earns the opponent 0; the payoff maximiser then takes a
    breakdown (the agent scores 0), not the first demand, nothing, which gave the agent its value 10."""
    game = load_game(
        "negotiation-gt", items="1,1,1", values="4,3,3", opponent_values="3,3,4", memory=0, rounds=1
    )
    solver = DealSolver(game)
    everything = game.rules.encode((1, 1, 1))
    legal = game.rules.legal((1, 1, 1))
    table = np.array([[float(a == everything) for a in legal]])
    result = solver.evaluate(table)
    assert result.br_payoff == pytest.approx(0.0) and result.agent_payoff == pytest.approx(0.0)
