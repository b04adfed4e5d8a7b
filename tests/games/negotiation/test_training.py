"""Split bargaining's training environment: exact reach and utility against the train pool,
vectorised matches equal to the rules, and tabular SEPO against payoff-only GRPO."""
import numpy as np
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.negotiation.bots import BOTS
from sepo.games.negotiation.rollouts import play_matches
from sepo.games.negotiation.training import NegotiationTrainingEnvironment
from sepo.opponents.pools import default_pools
from sepo.policies.tabular import TabularPolicy


def _env(**params):
    game = load_game("negotiation", **params)
    pools = default_pools("negotiation", "rigorous", game)
    return game, NegotiationTrainingEnvironment(game, [s for s in pools["train"]], pools["collusive"])


def test_vectorised_matches_follow_the_rules():
    game = load_game("negotiation", breakdown_cost=1.0)
    bots = [BOTS[name]() for name in ("Concede", "ConcedeStep", "Complement", "Hardball")]
    played = play_matches(
        game, BOTS["ReciprocalBalanced"](), bots, np.arange(4), np.zeros((4, game.rounds, 2))
    )
    for index, bot in enumerate(bots):
        episode = play_episodes(game, BOTS["ReciprocalBalanced"](), [type(bot)()], [0], agent_seed=0)[0]
        assert [tuple(p) for p in played.payoff[index].tolist()] == [r.payoffs for r in episode.rounds]


def test_training_reach_and_exact_utility():
    game, env = _env()
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(9), size=len(env.keys))
    reach = env.training_reach(table)
    assert reach.sum() == pytest.approx(game.rounds) and reach[0] == pytest.approx(1.0)
    rollouts = env.rollouts(table, groups=2000, group_size=2, rng=rng)
    counts = np.bincount(rollouts.states.reshape(-1), minlength=len(env.keys)) / len(rollouts.groups)
    assert np.all(np.abs(counts - reach) <= 5 * np.sqrt(game.rounds * reach / len(rollouts.groups)) + 1e-9)
    exact = env.exact_metrics(table)
    assert abs(rollouts.utility.mean() - exact["utility"]) < 4 * rollouts.utility.std() / np.sqrt(
        len(rollouts.utility)
    )
    # a deterministic agent: the exact utility is the played one
    complement = TabularPolicy(
        np.array(
            [
                [float(a == (4 if k == "start" else 9 - int(k.split("-")[1]))) for a in range(9)]
                for k in env.keys
            ]
        ),
        env.keys,
    )
    played = [
        play_episodes(game, BOTS["Complement"](), [BOTS[name]()], [0], agent_seed=0)[0].agent_payoffs.mean()
        for name in ("Fair", "Balanced", "Concede", "Hardball")
    ]
    assert env.exact_metrics(complement.table)["utility"] == pytest.approx(np.mean(played))


def test_sepo_lowers_the_exact_gap_and_the_constant_penalty_is_no_penalty(tmp_path):
    from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

    def run(penalty, steps=40):
        config = TabularSEPOConfig(
            game="negotiation",
            penalty=penalty,
            lambda_e=5.0,
            steps=steps,
            groups=16,
            group_size=4,
            seed=3,
            learning_rate=0.1,
            final_learning_rate=0.05,
        )
        trainer = TabularSEPOTrainer(config, tmp_path / penalty)
        return trainer.train(), trainer.policy()

    sepo, _ = run("per-rollout")
    grpo, none_policy = run("none")
    _, constant_policy = run("constant")
    assert np.abs(constant_policy - none_policy).max() < 1e-9  # a group-constant penalty cancels
    assert sepo["adversarial_gap"] < 0.5 * grpo["adversarial_gap"]
