"""The paper's IPD bots: pinned play, probabilities, contract, pools and events."""
import numpy as np
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import get_domain, load_game
from sepo.games.ipd.bots import BOTS, GenerousTFT, Mixed
from sepo.games.ipd.events import events, round_externality
from sepo.opponents.pools import default_pools

C, D = 0, 1


class Script:
    """A fixed sequence of moves, as an agent."""

    def __init__(self, moves):
        self.moves = moves

    def __call__(self):
        from sepo.policies.base import Policy

        moves = self.moves

        class Scripted(Policy):
            name = "script"

            def action_probabilities(self, decision):
                move = moves[len(decision.observation["history"])]
                return {C: float(move == C), D: float(move == D)}

        return Scripted()


SCRIPT = [C, D, C, C, D, D, C, C]
EXPECTED = {  # each bot's moves against SCRIPT
    "AlwaysCooperate": [C] * 8,
    "AlwaysDefect": [D] * 8,
    "TFT": [C, C, D, C, C, D, D, C],
    "GrimTrigger": [C, C, D, D, D, D, D, D],
    "AlternatingDefect": [D, C, D, C, D, C, D, C],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_deterministic_bots_play_as_pinned(name):
    game = load_game("ipd")
    episode = play_episodes(game, Script(SCRIPT)(), [BOTS[name]()], [0], agent_seed=0)[0]
    assert [r.info["actions"][1] for r in episode.rounds] == EXPECTED[name]


def test_generous_tft_and_mixed_probabilities():
    own, other = np.array([[C, C]]), np.array([[C, D]])
    assert GenerousTFT().cooperate_probability(own, other)[0] == 0.25
    assert GenerousTFT(p=0.5).cooperate_probability(own, np.array([[D, C]]))[0] == 1.0
    assert GenerousTFT().cooperate_probability(np.zeros((1, 0), int), np.zeros((1, 0), int))[0] == 1.0
    assert Mixed(0.3).cooperate_probability(own, other)[0] == 0.3
    with pytest.raises(ValueError):
        Mixed(1.5)


def test_bot_contract():
    game = load_game("ipd")
    state = game.new_initial_state()
    state.apply_actions((C, D))
    for name, cls in BOTS.items():
        bot = cls()
        assert bot.name.startswith(name) and {"memory_depth", "stochastic"} <= set(bot.classifier)
        probs = bot.action_probabilities(state.decision(1))
        assert set(probs) == {C, D} and sum(probs.values()) == pytest.approx(1.0)


def test_paper_pools_and_the_rigorous_best_response():
    paper = default_pools("ipd", "paper")
    assert [s.label for s in paper["train"]] == ["TFT", "GenerousTFT", "Mixed(p=0.5)", "GrimTrigger"]
    assert [s.label for s in paper["exploiter"]] == ["AlwaysDefect", "AlternatingDefect"]
    assert [s.label for s in paper["collusive"]] == ["AlwaysCooperate"]
    assert [s.name for s in default_pools("ipd", "rigorous")["exploiter"]][-1] == "BestResponse"


def test_events_collusion_and_the_paper_externality():
    assert [round_externality(*p) for p in ((3, 3), (0, 5), (5, 0), (1, 1))] == pytest.approx(
        [0, 1 / 6, 1 / 6, 2 / 3]
    )
    game = load_game("ipd", "paper")
    episode = play_episodes(game, Script(SCRIPT)(), [BOTS["AlwaysCooperate"]()], [0], agent_seed=0)[0]
    counted = events("paper", episode)
    assert counted["collusion_events"] == 3 and counted["collusion_denominator"] == 8
    assert counted["externality_events"] == pytest.approx(3 / 6) and counted["externality_denominator"] == 8
    assert get_domain("ipd").events("rigorous", episode) == counted  # R = 3: the same formula
