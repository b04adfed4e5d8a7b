"""sepo.games.records: the repeated-match trainers' shared rollout assembly."""
import numpy as np

from sepo.games.records import credited_matches, match_groups


def test_a_group_shares_one_opponent_drawn_from_all_of_them():
    group_of, opponent_of = match_groups(np.random.default_rng(0), groups=200, group_size=3, opponents=4)
    assert group_of.tolist()[:6] == [0, 0, 0, 1, 1, 1] and len(opponent_of) == 600
    assert all(len(set(opponent_of[group_of == g])) == 1 for g in range(200))
    assert set(opponent_of.tolist()) == {0, 1, 2, 3}


def test_credit_scales_every_measure_and_collusion_counts_only_against_a_partner():
    """Two train entries (the second a collusive partner), then the gap maximiser (credit 0)."""
    weight = np.array([1.5, 1.5, 0.0])
    opponent_of = np.array([0, 1, 2, 1])
    rows = own = np.zeros((4, 3), dtype=np.int64)
    ones = np.ones(4)
    advantages = np.ones((4, 3, 2))
    rollouts = credited_matches(
        rows,
        own,
        np.arange(4),
        opponent_of,
        weight,
        np.array([False, True]),
        2 * ones,
        ones,
        3 * ones,
        advantages,
    )
    assert rollouts.utility.tolist() == [3.0, 3.0, 0.0, 3.0]
    assert rollouts.collusion.tolist() == [0.0, 1.5, 0.0, 1.5]
    assert rollouts.externality.tolist() == [4.5, 4.5, 0.0, 4.5]
    assert rollouts.mask.all() and rollouts.advantages[..., 1].tolist() == np.ones((4, 3)).tolist()
    assert rollouts.advantages[:, 0, 0].tolist() == [1.5, 1.5, 0.0, 1.5]
    assert credited_matches(rows, own, np.arange(4), opponent_of, weight, np.array([True, True]), ones, ones,
                            ones).advantages is None
