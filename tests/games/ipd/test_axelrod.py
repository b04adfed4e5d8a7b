"""IPD matches against the Axelrod library: the same scores as axelrod.Match, exact distributions by
replay."""

import numpy as np
import pytest

axl = pytest.importorskip("axelrod")

from sepo.errors import SepoError  # noqa: E402
from sepo.evaluation.play import play_episodes  # noqa: E402
from sepo.games.ipd.axelrod_bots import AxelrodPlayer  # noqa: E402
from sepo.games.ipd.bots import BOTS  # noqa: E402
from sepo.games.ipd.rules import IteratedPrisonersDilemma  # noqa: E402

DETERMINISTIC_PAIRS = [
    ("TitForTat", "Defector"),
    ("BackStabber", "Prober"),
    ("Grudger", "Alternator"),
    ("SuspiciousTitForTat", "TitForTat"),
    ("TitFor2Tats", "Bully"),
    ("WinStayLoseShift", "Defector"),
    ("Prober", "Cooperator"),
    ("DoubleCrosser", "TitForTat"),
    ("Gradual", "Alternator"),
    ("FirstByDavis", "Prober2"),
    ("HardTitForTat", "CyclerCCD"),
    ("Handshake", "Grudger"),
    ("ThueMorse", "TitForTat"),
    ("ThueMorseInverse", "Alternator"),
]


def _match(first, second, rounds, seed=0, payoffs=(3, 0, 5, 1)):
    r, s, t, p = payoffs
    match = axl.Match((first, second), turns=rounds, game=axl.Game(r=r, s=s, t=t, p=p), seed=seed)
    match.play()
    return match.final_score()


@pytest.mark.parametrize("rounds", [8, 13])
@pytest.mark.parametrize("agent, opponent", DETERMINISTIC_PAIRS)
def test_deterministic_pairs_score_as_in_axelrod(agent, opponent, rounds):
    game = IteratedPrisonersDilemma(rounds=rounds)
    episode = play_episodes(game, AxelrodPlayer(agent), [AxelrodPlayer(opponent)], [0], agent_seed=1)[0]
    ours = (episode.agent_payoffs.sum(), episode.opponent_payoffs.sum())
    assert ours == _match(getattr(axl, agent)(), getattr(axl, opponent)(), rounds)


def test_match_length_reaches_end_game_strategies():
    game = IteratedPrisonersDilemma(rounds=10, payoffs="R=4,S=0,T=6,P=1")
    episode = play_episodes(
        game, AxelrodPlayer("BackStabber"), [AxelrodPlayer("Cooperator")], [0], agent_seed=1
    )[0]
    assert [d.action for d in episode.decisions][-2:] == [1, 1]  # BackStabber defects in the last two rounds
    assert (episode.agent_payoffs.sum(), episode.opponent_payoffs.sum()) == _match(
        axl.BackStabber(), axl.Cooperator(), 10, payoffs=(4, 0, 6, 1)
    )


@pytest.mark.parametrize(
    "ours, theirs",
    [
        ("TFT", axl.TitForTat),
        ("GrimTrigger", axl.Grudger),
        ("AlwaysDefect", axl.Defector),
        ("AlwaysCooperate", axl.Cooperator),
    ],
)
def test_paper_bots_play_like_their_axelrod_namesakes(ours, theirs):
    game = IteratedPrisonersDilemma()
    for other in ("Prober", "Alternator", "TitForTat", "Random"):
        episode = play_episodes(game, BOTS[ours](), [AxelrodPlayer(other)], [3], agent_seed=1)[0]
        moves = [(d.action, r.info["actions"][1]) for d, r in zip(episode.decisions, episode.rounds)]
        own = [o for o, _ in moves]
        replay = axl.MockPlayer(actions=[axl.Action.C if o == 0 else axl.Action.D for _, o in moves])
        expected = axl.Match((theirs(), replay), turns=8).play()
        assert own == [0 if a == axl.Action.C else 1 for a, _ in expected]


def test_stochastic_pair_agrees_in_distribution():

    game = IteratedPrisonersDilemma()
    n = 600
    episodes = play_episodes(
        game,
        AxelrodPlayer("TitForTat"),
        [AxelrodPlayer("Random") for _ in range(n)],
        list(range(n)),
        agent_seed=0,
    )
    ours = np.array([e.opponent_payoffs.sum() for e in episodes])
    theirs = np.array([_match(axl.TitForTat(), axl.Random(), 8, seed=seed)[1] for seed in range(n)])
    values = np.union1d(ours, theirs)
    counts_ours = np.array([(ours == v).sum() for v in values])
    counts_theirs = np.array([(theirs == v).sum() for v in values])
    keep = (counts_ours + counts_theirs) >= 10
    table = np.stack([counts_ours[keep], counts_theirs[keep]])
    from scipy.stats import chi2_contingency

    assert chi2_contingency(table).pvalue > 1e-3
    assert abs(ours.mean() - theirs.mean()) < 4 * np.sqrt(ours.var() / n + theirs.var() / n)


def test_exact_distributions_by_replay():
    game = IteratedPrisonersDilemma()
    obs = game.new_initial_state().decision(0).observation
    zd = AxelrodPlayer("ZDExtort2")
    four = axl.ZDExtort2()
    four.set_match_attributes(length=8, game=axl.Game(), noise=0)
    four.receive_match_attributes()
    C, D = axl.Action.C, axl.Action.D
    for last, key in [((0, 0), (C, C)), ((0, 1), (C, D)), ((1, 0), (D, C)), ((1, 1), (D, D))]:
        assert zd.cooperate_probability_at(obs, (last,)) == pytest.approx(four._four_vector[key])
    assert AxelrodPlayer("TitForTat").cooperate_probability_at(obs, ((0, 1),)) == 0.0
    assert AxelrodPlayer("GTFT", p=0.25).cooperate_probability_at(obs, ((0, 1),)) == pytest.approx(0.25)


def test_unknown_or_unsupported_strategies_are_refused_in_one_line():
    with pytest.raises(SepoError, match="near matches: Prober"):
        AxelrodPlayer("Probr")
    with pytest.raises(SepoError, match="unknown Axelrod strategy 'Geller'"):
        AxelrodPlayer("Geller")  # cheats by reading its opponent's code: not offered


def test_axelrod_agent_spec_with_parameters():
    from sepo.games import load_game
    from sepo.policies.specs import load_agent

    agent = load_agent("axelrod:GTFT(p=0.25)", load_game("ipd"))
    assert agent.name == "axelrod:GTFT(p=0.25)" and agent.classifier["stochastic"]
    with pytest.raises(SepoError, match="near matches: TitForTat"):
        load_agent("axelrod:TitForTatt", load_game("ipd"))


@pytest.mark.parametrize("name, cooperations", [("ThueMorse", 3), ("ThueMorseInverse", 2)])
def test_sequence_strategies_holding_a_generator_are_audited_exactly(name, cooperations):
    """ThueMorse keeps a generator (which cannot be deep-copied) in its state; the audit replays
    copies of it. Against a fixed sequence the best response defects throughout: it takes T − S
    per cooperation of the strategy's first five moves (D C C D C for ThueMorse)."""
    from sepo.games import load_game
    from sepo.metrics.exact import exact_solver

    game = load_game("ipd", rounds=5)
    result = exact_solver(game).audit(AxelrodPlayer(name)).result
    assert result.exact and result.value == pytest.approx(5.0 * cooperations / 5)


def _copies_continue_alike(cls) -> bool:
    """After a few rounds, a copy of the (strategy, agent) pair and the original play the same
    next moves against the same agent moves."""
    from sepo.games.ipd.axelrod_bots import _copy_pair, _opponent_class

    C, D = axl.Action.C, axl.Action.D
    pair = (cls(), _opponent_class()())
    for p in pair:
        p.set_match_attributes(length=12, game=axl.Game(), noise=0)
    pair[0].set_seed(7)
    agent_moves = [C, D, D, C, C, D, C, D, D, D, C, C]

    def play(players, moves):
        out = []
        for move in moves:
            own = players[0].strategy(players[1])
            players[0].update_history(own, move)
            players[1].update_history(move, own)
            out.append(own)
        return out

    play(pair, agent_moves[:5])
    copied = _copy_pair(pair)
    return play(copied, agent_moves[5:]) == play(pair, agent_moves[5:])


@pytest.mark.slow
def test_every_deterministic_axelrod_strategy_is_copied_mid_match():
    """Every strategy sepo offers can be copied mid-match (about 30 s for 244 strategies), and the
    copy of a deterministic one continues exactly as the original."""
    from sepo.games.ipd.axelrod_bots import _cheats

    offered = [cls for cls in axl.all_strategies if not _cheats(cls)]
    assert len(offered) >= 240
    differ = [
        cls.__name__
        for cls in offered
        if not cls.classifier.get("stochastic") and not _copies_continue_alike(cls)
    ]
    assert differ == []


def test_a_strategy_that_keeps_its_state_on_its_class_is_refused_in_one_line():
    """Darwin's record is a class attribute shared by every instance: replaying copies of it
    changes the original, so it is not one policy (its audit would depend on the order of play)."""
    with pytest.raises(
        SepoError, match="'Darwin' is not offered: its classifier says inspects_source"
    ) as refused:
        AxelrodPlayer("Darwin")
    assert "\n" not in str(refused.value)
