"""Vectorised matches follow the rules."""
import numpy as np

from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.ipd.bots import BOTS
from sepo.games.ipd.rollouts import key_rows, play_matches


def test_vectorised_matches_equal_the_rules_for_deterministic_bots():
    game = load_game("ipd", rounds=9, payoffs="R=4,S=-1,T=6,P=0")
    names = ["TFT", "GrimTrigger", "AlternatingDefect", "AlwaysDefect"]
    opponents = [BOTS[n]() for n in names]
    for agent_name in names:
        fast = play_matches(
            BOTS[agent_name](),
            opponents,
            np.arange(len(names)),
            game.rounds,
            game.payoffs.matrix,
            np.full((len(names), game.rounds, 2), 0.5),
        )
        for i, name in enumerate(names):
            episode = play_episodes(game, BOTS[agent_name](), [BOTS[name]()], [0], agent_seed=0)[0]
            assert list(fast.payoff[i, :, 0]) == list(episode.agent_payoffs)
            assert list(fast.payoff[i, :, 1]) == list(episode.opponent_payoffs)


def test_key_rows_follow_the_information_state_order():
    game = load_game("ipd", memory=2)
    keys = game.info_keys()
    own, other = np.array([[0, 1, 1]]), np.array([[1, 1, 0]])
    assert keys[key_rows(own, other, 2)[0]] == "DD,DC"
    assert keys[key_rows(own[:, :1], other[:, :1], 2)[0]] == "CD"
    assert keys[key_rows(own[:, :0], other[:, :0], 2)[0]] == "start"
