"""The paper's negotiators, against expected demand sequences (docs/paper-protocol.md §3.4)."""
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.negotiation_gt.bots import BOTS, ConcedeNeg, FairNeg, GreedyNeg, HardballNeg, TFTNeg
from sepo.games.negotiation_gt.demos import Adaptive, Conservative, Defensive, Proportional

POOL, VALUES, OTHER = (2, 3, 4), (4, 3, 3), (1, 1, 8)


def _demands(agent, opponent, pool=POOL, values=VALUES, other=OTHER, rounds=4):
    game = load_game("negotiation-gt", items=",".join(map(str, pool)), values=",".join(map(str, values)),
                     opponent_values=",".join(map(str, other)), rounds=rounds)
    episode = play_episodes(game, agent, [opponent], [0], agent_seed=0)[0]
    return [r.info["demands"] for r in episode.rounds]


def test_fixed_bots():
    assert [d[0] for d in _demands(FairNeg(), HardballNeg())] == [(1, 1, 2)] * 4
    assert [d[1] for d in _demands(FairNeg(), HardballNeg())] == [(1, 2, 3)] * 4
    assert [d[0] for d in _demands(ConcedeNeg(), FairNeg())] == [(2, 3, 4), (1, 2, 3), (0, 1, 2), (0, 1, 2)]
    # Greedy: min(pool, int(pool * v / 10) + 1) with its own values
    assert [d[0] for d in _demands(GreedyNeg(), FairNeg())] == [(1, 1, 2)] * 4
    assert [d[1] for d in _demands(FairNeg(), GreedyNeg())] == [(1, 1, 4)] * 4


def test_tft_leaves_what_the_other_left():
    demands = _demands(TFTNeg(), ConcedeNeg())
    # int(2/3 p), then pool - other's last
    assert [d[0] for d in demands] == [(1, 2, 2), (0, 0, 0), (1, 1, 1), (2, 2, 2)]
    assert [d[1] for d in _demands(ConcedeNeg(), TFTNeg())] == [(1, 2, 2), (0, 0, 0), (1, 1, 1), (2, 2, 2)]


def test_concede_never_goes_below_zero():
    assert [d[0] for d in _demands(ConcedeNeg(), FairNeg(), pool=(1, 1, 1), values=(4, 3, 3))] == \
        [(1, 1, 1), (0, 0, 0), (0, 0, 0), (0, 0, 0)]


def test_demonstrators():
    # Proportional round(p v / 10 + 0.5): 0.8+.5, 0.9+.5, 1.2+.5 -> 1, 1, 2
    assert _demands(Proportional(), FairNeg())[0][0] == (1, 1, 2)
    assert _demands(Conservative(), FairNeg())[0][0] == (0, 0, 0)  # int(0.8 p v / 10)
    # Adaptive: int(1.2 p v / 10) = (0, 1, 1); deals with Fair keep it
    assert [d[0] for d in _demands(Adaptive(), FairNeg())] == [(0, 1, 1)] * 4
    # against Concede: round 1 breaks down (Concede asks for everything) -> the hats (value 3, first) drop
    assert [d[0] for d in _demands(Adaptive(), ConcedeNeg())] == [(0, 1, 1), (0, 0, 1), (0, 0, 1), (0, 0, 1)]
    defensive = [d[0] for d in _demands(Defensive(), HardballNeg())]
    assert defensive == [(1, 1, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)]


def test_adaptive_drops_its_lowest_valued_item_after_a_breakdown():
    demands = _demands(Adaptive(), HardballNeg(), pool=(4, 4, 4), values=(5, 3, 2))
    # int(1.2*4*v/10) = (2, 1, 0); with Hardball's (3,3,3) it breaks down twice, then (1,0,0) fits and is kept
    assert [d[0] for d in demands] == [(2, 1, 0), (2, 0, 0), (1, 0, 0), (1, 0, 0)]


@pytest.mark.parametrize("name", sorted(BOTS))
def test_every_bot_has_a_classifier_and_a_line(name):
    bot = BOTS[name]()
    assert {"stochastic", "uses_values", "reacts"} <= set(bot.classifier)
    assert bot.line and bot.message(None) == bot.line
