"""Advantage Alignment in the tabular trainer: its expected update against the formula, by exact
enumeration of every match of a small IPD, with the advantages computed independently over the
game's own states; its wiring (β = 0 is payoff-only GRPO)."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import load_game
from sepo.games.records import Rollouts
from sepo.opponents.pools import parse_bot
from sepo.policies.tabular import TabularPolicy
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer, policy_score
from tests.training.exact_updates import expand, row_of, score, softmax

BETA, GAMMA = 1.7, 0.8


def _values(game, table, keys, opponent):
    """V^i(state) for both sides (agent, opponent), the agent playing `table` in seat 0 and `opponent`
    in seat 1, by recursion over the game's states (memoised by the joint history)."""
    memo = {}

    def value(state, history):
        if history not in memo:
            if state.is_terminal():
                memo[history] = np.zeros(2)
            else:
                mine, theirs = state.decision(0), state.decision(1)
                total = np.zeros(2)
                for a, p in zip(mine.legal_actions, table[keys[mine.info_key]]):
                    for b, q in opponent.action_probabilities(theirs).items():
                        child = state.clone()
                        child.apply_actions((a, b))
                        total += (
                            p
                            * q
                            * (
                                np.array(child.rounds()[-1].payoffs, dtype=float)
                                + value(child, history + ((a, b),))
                            )
                        )
                memo[history] = total
        return memo[history]

    return value


@pytest.mark.parametrize("name, params, pool, self_play", [
    ("ipd", {"rounds": 3, "memory": 1}, ["TFT", "Mixed(p=0.5)"], False),
    ("ipd", {"rounds": 3, "memory": 1}, ["GrimTrigger"], True),
    ("pricing", {"rounds": 3, "prices": 3}, ["TitForTat", "Undercut"], False),
])
def test_expected_update_is_the_formula_by_exact_enumeration(tmp_path, name, params, pool, self_play):
    game = load_game(name, **params)
    config = TabularSEPOConfig(game=name, game_params=params, train_pool=pool, method="advantage-alignment",
                               aa_beta=BETA, aa_gamma=GAMMA, self_play=self_play, steps=1)
    trainer = TabularSEPOTrainer(config, tmp_path / "run")
    env = trainer.env
    table = softmax(np.random.default_rng(1).normal(size=env.legal.shape))
    keys = row_of(env)
    # the rollouts' opponents as policies of the game (the gap maximiser's rollouts carry no term: left out)
    played = (
        [TabularPolicy(table, env.keys)]
        if self_play
        else [parse_bot(name, entry).build(game) for entry in pool]
    )
    values = [_values(game, table, keys, bot) for bot in played]
    rounds = game.rounds

    expected = np.zeros_like(table)
    leaves = []

    def leaf(node, decisions):
        # the formula, term by term, with advantages from the recursion over the game's states
        state = game.new_initial_state()
        own, other = [], []
        for t, (a, b) in enumerate(node.history):
            before = values[node.opponent](state, node.history[:t])
            state.apply_actions((a, b))
            advantage = (
                np.array(state.rounds()[-1].payoffs, dtype=float)
                + values[node.opponent](state, node.history[: t + 1])
                - before
            )
            # scaled by s, credited as the payoff is
            own.append(env.weight[node.opponent] * env.scale * advantage[0])
            other.append(env.scale * advantage[1])
        for t, (row, column) in enumerate(decisions):
            term = BETA * GAMMA * sum(GAMMA ** (t - k) * own[k] for k in range(t)) * other[t] / rounds
            expected[:] += node.p * term * score(table, row, column)
        leaves.append((node, decisions))

    expand(game, table, keys, played, (0,), leaf=leaf)
    # the term moves the policy here (profits are ~0.2 a period in pricing)
    assert np.abs(expected).max() > 1e-5

    # the trainer's own path: the environment's advantages, the trainer's term, its score
    states = np.array([[r for r, _ in d] for _, d in leaves])
    actions = np.array([[c for _, c in d] for _, d in leaves])
    own = np.array([[a for a, _ in n.history] for n, _ in leaves])
    other = np.array([[b for _, b in n.history] for n, _ in leaves])
    opponent_of = np.array([n.opponent for n, _ in leaves])
    probability = np.array([n.p for n, _ in leaves])
    joint = env.match_advantages(table, own, other, opponent_of)
    joint[..., 0] *= env.weight[opponent_of][:, None]
    zeros = np.zeros(len(leaves))
    rollouts = Rollouts(
        states, actions, np.ones_like(states, dtype=bool), np.arange(len(leaves)), zeros, zeros, zeros, joint
    )
    update = policy_score(table, rollouts, trainer.alignment(rollouts) * probability[:, None])
    assert np.allclose(update, expected, rtol=0, atol=1e-12), np.abs(update - expected).max()


def test_beta_zero_is_payoff_only_grpo_and_beta_moves_it(tmp_path):
    def logits(name, **overrides):
        config = TabularSEPOConfig(
            game="ipd",
            game_params={"rounds": 4, "memory": 1},
            steps=15,
            groups=16,
            group_size=4,
            seed=2,
            **overrides,
        )
        trainer = TabularSEPOTrainer(config, tmp_path / name)
        trainer.train()
        return trainer.logits

    none = logits("none", penalty="none")
    assert np.abs(logits("aa0", method="advantage-alignment", aa_beta=0.0) - none).max() <= 1e-12
    assert np.abs(logits("aa", method="advantage-alignment", aa_beta=2.0) - none).max() > 1e-3


def test_penalties_do_not_apply_and_games_without_advantages_are_refused(tmp_path):
    with pytest.raises(SepoError, match="do not apply"):
        TabularSEPOConfig(game="ipd", method="advantage-alignment", lambda_e=1.0).validate()
    with pytest.raises(SepoError, match="advantage-alignment trains in games"):
        TabularSEPOTrainer(
            TabularSEPOConfig(game="kuhn", method="advantage-alignment", steps=1), tmp_path / "k"
        )
    with pytest.raises(SepoError, match="self-play"):
        TabularSEPOTrainer(TabularSEPOConfig(game="kuhn", self_play=True, steps=1), tmp_path / "s")


def test_language_model_trainer_adds_the_same_expected_term(tmp_path):
    """A completion stands for one decision drawn uniformly from a match's T, with the opponent's
    advantage in expectation over its move: its expected term update per completion equals the
    tabular trainer's per match (one objective, as for SEPO's terms)."""
    from sepo.games.records import MatchContext
    from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment

    pool, rounds = ["TFT", "Mixed(p=0.5)"], 3
    params = {"rounds": rounds, "memory": 1}
    llm = SEPOEnvironment(
        LLMSEPOConfig(
            model="none",
            game="ipd",
            game_params=params,
            train_pool=pool,
            method="advantage-alignment",
            aa_beta=BETA,
            aa_gamma=GAMMA,
        ),
        None,
        None,
    )
    tabular = TabularSEPOTrainer(
        TabularSEPOConfig(
            game="ipd",
            game_params=params,
            train_pool=pool,
            method="advantage-alignment",
            aa_beta=BETA,
            aa_gamma=GAMMA,
            steps=1,
        ),
        tmp_path / "run",
    )
    game, env = llm.game, tabular.env
    table = softmax(np.random.default_rng(4).normal(size=(len(env.keys), 2)))
    keys = row_of(env)
    opponents = env.rollout_opponents(table)

    language = np.zeros_like(table)

    def visit(node):
        row = keys[node.state.decision(0).info_key]
        context = MatchContext(row, node.history, node.opponent)
        for column in range(2):
            term = llm.alignment(table, context, column)
            language[:] += node.p / rounds * table[row, column] * term * score(table, row, column)

    expand(game, table, keys, opponents, (0,), visit=visit)

    leaves = []
    expand(game, table, keys, opponents, (0,), leaf=lambda node, decisions: leaves.append((node, decisions)))
    states = np.array([[r for r, _ in d] for _, d in leaves])
    own = np.array([[a for a, _ in n.history] for n, _ in leaves])
    other = np.array([[b for _, b in n.history] for n, _ in leaves])
    opponent_of = np.array([n.opponent for n, _ in leaves])
    joint = env.match_advantages(table, own, other, opponent_of)
    joint[..., 0] *= env.weight[opponent_of][:, None]
    zeros = np.zeros(len(leaves))
    rollouts = Rollouts(
        states, own, np.ones_like(states, dtype=bool), np.arange(len(leaves)), zeros, zeros, zeros, joint
    )
    probability = np.array([n.p for n, _ in leaves])
    exact = policy_score(table, rollouts, tabular.alignment(rollouts) * probability[:, None])
    assert np.abs(exact).max() > 1e-3
    assert np.allclose(language, exact, rtol=0, atol=1e-12), np.abs(language - exact).max()
