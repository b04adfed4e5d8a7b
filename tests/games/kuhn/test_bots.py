"""Kuhn bots (Axelrod-style expected move tables) and pools as data.

Each bot's probability of BET (or CALL when facing a bet) is written out for all 12 information
states from docs/paper-protocol.md §3.5 (and §4.1 for the SFT demonstration strategies), and checked
both through `.table` and through decisions reached in a real KuhnState, in either seat.
"""
from __future__ import annotations

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games.kuhn import bots
from sepo.games.kuhn.pools import PAPER_POOLS
from sepo.games.kuhn.rules import DEALS, INFO_STATES, KuhnPoker
from sepo.opponents.pools import BEST_RESPONSE, POOL_NAMES, BotSpec, default_pools, load_pools, parse_bot

# keys: card (0 J, 1 Q, 2 K) + history. "c", "cp": not facing a bet; "cb", "cpb": facing a bet.
#                 J     Q     K      J-after-pass Q   K     J-facing Q     K     J-pb  Q    K
ORDER = ("0", "1", "2", "0p", "1p", "2p", "0b", "1b", "2b", "0pb", "1pb", "2pb")
THIRD = 1 / 3
EXPECTED = {
    # opening or after a check: K bets, Q passes, J bets alpha; facing a bet: K calls, J folds, Q 1/3
    "NashApprox": (THIRD, 0, 1, THIRD, 0, 1, 0, THIRD, 1, 0, THIRD, 1),
    # K bets/calls; otherwise passes/folds
    "TightPassive": (0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1),
    # K or Q bets/calls; J passes, or folds to a bet
    "LooseAggressive": (0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1),
    # facing a bet: calls only with K; otherwise J passes, Q and K bet
    "MaxExploiter": (0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1),
    "AlwaysPass": (0,) * 12,
    "AlwaysBet": (1,) * 12,
    # SFT strategies (§4.1): K bets, Q passes, J bluffs 0.2, calls only with K; uniform over legal
    "PotControl": (0.2, 0, 1, 0.2, 0, 1, 0, 0, 1, 0, 0, 1),
    "RandomLegal": (0.5,) * 12,
}
PAPER_BOTS = ("NashApprox", "TightPassive", "LooseAggressive", "MaxExploiter", "AlwaysPass", "AlwaysBet")


def reach(key: str, seat_of_player0: int = 0):
    """A KuhnState (2 hands) at information state `key` for the player to act, and that player.
    `seat_of_player0` 1 plays a first hand so that player 0 sits in seat 1."""
    card, history = int(key[0]), key[1:]
    seat = 0 if len(history) in (0, 2) else 1
    state = KuhnPoker(hands=2).new_initial_state()
    if seat_of_player0 == 1:
        for action in (0, 0, 0):  # a first hand: deal 0, pass, pass
            state.apply_action(action)
    other = next(c for c in range(3) if c != card)
    cards = (card, other) if seat == 0 else (other, card)
    state.apply_action(DEALS.index(cards))
    for move in history:
        state.apply_action("pb".index(move))
    player = state.current_player()
    decision = state.decision(player)
    assert decision.info_key == key
    return decision


def test_info_state_order_is_the_canonical_one():
    assert INFO_STATES == ORDER


def test_paper_bots_exist_and_the_registry_is_exactly_the_expected_tables():
    assert set(PAPER_BOTS) <= set(bots.BOTS)
    assert set(bots.BOTS) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_expected_move_table(name):
    bot = bots.BOTS[name]()
    expected = np.array(EXPECTED[name], dtype=float)
    table = bot.table
    assert table.shape == (12, 2)
    assert np.allclose(table[:, 1], expected, atol=1e-15), dict(zip(INFO_STATES, table[:, 1]))
    assert np.allclose(table.sum(1), 1.0, atol=1e-15)
    for index, key in enumerate(INFO_STATES):
        for seat_of_player0 in (0, 1):
            decision = reach(key, seat_of_player0)
            probs = bot.action_probabilities(decision)
            assert set(probs) == {0, 1}
            assert probs[1] == pytest.approx(expected[index], abs=1e-15), (name, key)
            assert probs[0] == pytest.approx(1 - expected[index], abs=1e-15)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 1.0])
def test_nash_approx_alpha_changes_only_the_jack_bluffs(alpha):
    table = bots.NashApprox(alpha=alpha).table[:, 1]
    expected = np.array(EXPECTED["NashApprox"], dtype=float)
    expected[[INFO_STATES.index("0"), INFO_STATES.index("0p")]] = alpha
    assert np.allclose(table, expected, atol=1e-15)


def test_deterministic_bots_act_deterministically_and_samples_follow_the_table():
    rng = np.random.default_rng(0)
    for name in ("TightPassive", "LooseAggressive", "MaxExploiter", "AlwaysPass", "AlwaysBet"):
        bot = bots.BOTS[name]()
        for index, key in enumerate(INFO_STATES):
            decision = reach(key)
            actions = {c.action for c in bot.act([decision] * 20, rng)}
            assert actions == {int(EXPECTED[name][index])}
    decision = reach("1b")
    draws = [c.action for c in bots.NashApprox().act([decision] * 30000, rng)]
    assert np.mean(draws) == pytest.approx(1 / 3, abs=4 * np.sqrt(2 / 9 / 30000))


def test_bots_have_classifiers():
    for name, cls in bots.BOTS.items():
        assert {"stochastic", "bluffs", "tight"} <= set(cls.classifier), name
        stochastic = any(0 < p < 1 for p in EXPECTED[name])
        assert cls.classifier["stochastic"] == stochastic, name


# ----------------------------------------------------------------------------------- pools

def test_parse_bot_from_strings_and_mappings():
    assert parse_bot("kuhn", "TightPassive") == BotSpec("kuhn", "TightPassive", {})
    spec = parse_bot("kuhn", "NashApprox(alpha=0.2)")
    assert spec.name == "NashApprox" and spec.params == {"alpha": 0.2}
    assert spec.label == "NashApprox(alpha=0.2)"
    assert parse_bot("kuhn", "  NashApprox ( alpha = 0.2 ) ") == spec
    assert parse_bot("kuhn", {"bot": "NashApprox", "alpha": 0.2}) == spec
    built = spec.build()
    assert isinstance(built, bots.NashApprox) and built.alpha == 0.2
    assert spec.build() is not built  # a fresh instance each time
    assert parse_bot("kuhn", BEST_RESPONSE).name == BEST_RESPONSE


def test_default_pools_are_the_papers_and_rigorous_adds_the_best_response():
    paper = default_pools("kuhn", "paper")
    assert {k: [s.label for s in v] for k, v in paper.items()} == PAPER_POOLS
    assert PAPER_POOLS == {"train": ["NashApprox", "TightPassive", "LooseAggressive"],
                                   "exploiter": ["MaxExploiter"], "collusive": ["LooseAggressive"]}
    rigorous = default_pools("kuhn", "rigorous")
    assert [s.name for s in rigorous["exploiter"]] == ["MaxExploiter", BEST_RESPONSE]
    assert rigorous["train"] == paper["train"] and rigorous["collusive"] == paper["collusive"]
    # the paper pool list is not mutated by building the rigorous pools
    assert PAPER_POOLS["exploiter"] == ["MaxExploiter"]


def test_default_pools_rejects_an_unknown_protocol():
    with pytest.raises(SepoError, match="rigourous"):
        default_pools("kuhn", "rigourous")


def test_pools_load_from_yaml_and_json_files(tmp_path):
    path = tmp_path / "pools.yaml"
    path.write_text(
        "train:\n  - NashApprox(alpha=0.1)\n  - {bot: AlwaysBet}\n  - bot: NashApprox\n    alpha: 0.25\n"
        "exploiter: [MaxExploiter, BestResponse]\ncollusive: [LooseAggressive]\n"
    )
    pools = load_pools("kuhn", path)
    assert set(pools) == set(POOL_NAMES)
    assert [s.label for s in pools["train"]] == [
        "NashApprox(alpha=0.1)",
        "AlwaysBet",
        "NashApprox(alpha=0.25)",
    ]
    assert [s.name for s in pools["exploiter"]] == ["MaxExploiter", BEST_RESPONSE]
    assert pools["train"][2].build().alpha == 0.25
    json_path = tmp_path / "pools.json"
    json_path.write_text('{"train": ["TightPassive"], "collusive": []}')
    pools = load_pools("kuhn", json_path)
    assert [s.name for s in pools["train"]] == ["TightPassive"]
    assert pools["exploiter"] == [] and pools["collusive"] == []


@pytest.mark.parametrize(
    "entry,named",
    [
        ("NoSuchBot", "NoSuchBot"),
        ({"bot": "Nash"}, "Nash"),
        ("NashApprox(beta=0.2)", "beta"),        # unknown parameter
        ("NashApprox(alpha=high)", "alpha"),     # non-numeric parameter
        ("NashApprox(0.2)", "0.2"),              # not key=value
        ("TightPassive(alpha=0.1)", "alpha"),    # a bot without parameters
        ("Nash Approx", "Nash Approx"),          # unreadable spec
        ({"alpha": 0.2}, "bot"),                 # mapping without a bot name
        (3, "3"),                                # neither string nor mapping
    ],
)
def test_bad_bot_entries_raise_sepo_error_naming_the_problem(entry, named):
    with pytest.raises(SepoError) as info:
        parse_bot("kuhn", entry)
    assert named in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("entry", ["NashApprox(alpha=2)", {"bot": "NashApprox", "alpha": -0.5}])
def test_out_of_range_bot_parameter_raises_sepo_error(entry):
    with pytest.raises(SepoError, match="alpha"):
        parse_bot("kuhn", entry)


def test_out_of_range_bot_parameter_is_rejected_at_parse_time():
    """What does hold today: the bad value is rejected when the pool is read, not at play time."""
    with pytest.raises(ValueError, match="alpha"):
        parse_bot("kuhn", "NashApprox(alpha=2)")


def test_best_response_cannot_be_built_as_a_bot():
    with pytest.raises(SepoError, match=BEST_RESPONSE):
        parse_bot("kuhn", BEST_RESPONSE).build()


def test_unknown_game_and_unknown_default_pools_raise():
    with pytest.raises(SepoError, match="chess"):
        parse_bot("chess", "NashApprox")
    with pytest.raises(SepoError, match="chess"):
        default_pools("chess")


@pytest.mark.parametrize(
    "text,named",
    [
        ("train: [NashApprox]\nexploitr: [MaxExploiter]\n", "exploitr"),            # unknown pool name
        ("train: [NashApprox, Shark]\n", "Shark"),                                  # unknown bot
        ("train: [NashApprox(alpha=x)]\n", "alpha"),                                # bad parameter
        ("train: NashApprox\n", "train"),                                           # not a list
        ("exploiter: [MaxExploiter]\n", "train"),                                   # empty train pool
        ("- NashApprox\n- AlwaysBet\n", "mapping"),                                 # not a mapping
        ("train: [NashApprox\n", "YAML"),                                           # malformed
    ],
)
def test_bad_pool_files_raise_sepo_error_naming_the_problem(tmp_path, text, named):
    path = tmp_path / "pools.yaml"
    path.write_text(text)
    with pytest.raises(SepoError) as info:
        load_pools("kuhn", path)
    assert named in str(info.value)


def test_missing_pool_file_raises_sepo_error(tmp_path):
    with pytest.raises(SepoError, match="nope.yaml"):
        load_pools("kuhn", tmp_path / "nope.yaml")
