"""The SEPO reward, GRPO group normalisation and the exploitability attribution.

The key property (spec §5): with the per-rollout charge E(I, a) = (g(I,a) − Σ_b π(b|I) g(I,b)) / ρ(I),
g = ∂e/∂π and ρ = own reach × external reach, the expectation of E_r · ∇θ log P(r) over the
training distribution equals ∇θ e for softmax logits θ. It is computed here by exact enumeration
of opponents, seats, deals and every action path (no sampling), independently of the trainer's
vectorised sampler, and compared with the chain rule applied to kuhn_exact.exploitability_gradient
(itself checked against finite differences and OpenSpiel in tests/metrics/test_kuhn_exact.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games.kuhn import exact as ke
from sepo.games.kuhn.bots import BOTS
from sepo.games.kuhn.rules import DEALS, INFO_STATES, is_hand_over, seat_to_act
from sepo.objective.attribution import exploitation_attribution
from sepo.objective.sepo import (
    PENALTY_MODES,
    REWARD_SCALINGS,
    Lambdas,
    check_penalty_mode,
    group_advantages,
    group_mean,
    sepo_penalties,
    sepo_rewards,
    within_group_permutation,
)
from sepo.policies.tabular import softmax

# ------------------------------------------------------------------------ rewards, modes

def random_batch(seed, groups=12, size=6):
    rng = np.random.default_rng(seed)
    n = groups * size
    group = np.repeat(np.arange(groups), size)
    rng.shuffle(group)  # group membership need not be contiguous
    return dict(
        utility=rng.choice([-2.0, -1.0, 1.0, 2.0], size=n),
        exploit=rng.normal(scale=0.7, size=n),
        collusion=rng.random(n) * (rng.random(n) < 0.3),
        externality=(rng.random(n) < 0.2).astype(float),
        groups=group,
    )


@pytest.mark.parametrize("scaling", REWARD_SCALINGS)
def test_constant_penalty_advantages_equal_payoff_only_advantages(scaling):
    for seed in range(20):
        batch = random_batch(seed)
        lambdas = Lambdas(e=0.5 + seed, c=0.3 * seed, x=2.4)
        rewards = {
            mode: sepo_rewards(
                batch["utility"],
                batch["exploit"],
                batch["collusion"],
                batch["externality"],
                batch["groups"],
                lambdas,
                1.5,
                mode,
                rng=np.random.default_rng(seed),
            )
            for mode in PENALTY_MODES
        }
        advantages = {mode: group_advantages(r, batch["groups"], scaling) for mode, r in rewards.items()}
        # `constant` rewards differ from `none` rewards by one constant per group
        difference = rewards["constant"] - rewards["none"]
        assert np.allclose(difference, group_mean(difference, batch["groups"])[batch["groups"]], atol=1e-12)
        assert np.abs(difference).max() > 0.1
        assert np.abs(advantages["constant"] - advantages["none"]).max() <= 1e-12
        # the per-rollout penalty survives normalisation
        assert np.abs(advantages["per-rollout"] - advantages["none"]).max() > 1e-2


@pytest.mark.parametrize("scaling", REWARD_SCALINGS)
def test_constant_equals_none_also_with_zero_variance_groups(scaling):
    batch = random_batch(3, groups=4, size=8)
    order = np.argsort(batch["groups"], kind="stable")
    for key in batch:
        batch[key] = batch[key][order]
    batch["utility"][:8] = 1.0  # group 0: every rollout won 1 chip
    batch["utility"][8:16] = -2.0
    lambdas = Lambdas(e=5.0, c=2.4, x=1.8)
    args = (
        batch["utility"],
        batch["exploit"],
        batch["collusion"],
        batch["externality"],
        batch["groups"],
        lambdas,
        1.5,
    )
    none = group_advantages(sepo_rewards(*args, "none"), batch["groups"], scaling)
    constant = group_advantages(sepo_rewards(*args, "constant"), batch["groups"], scaling)
    assert np.abs(none[:16]).max() == 0.0
    assert np.abs(constant - none).max() <= 1e-12


def test_shuffled_charges_are_sepos_permuted_within_each_group_by_the_seed():
    """Every group keeps exactly SEPO's charges (the same values, so the same distribution and
    variance), each rollout charged another's; the same seed gives the same permutation."""
    batch = random_batch(4)
    lambdas = Lambdas(e=2.0, c=1.0, x=0.5)
    args = (
        batch["utility"],
        batch["exploit"],
        batch["collusion"],
        batch["externality"],
        batch["groups"],
        lambdas,
        1.5,
    )
    charges = {mode: 1.5 * batch["utility"] - sepo_rewards(*args, mode, rng=np.random.default_rng(7))
               for mode in ("per-rollout", "shuffled")}
    assert np.allclose(charges["per-rollout"], sepo_penalties(*args[1:4], lambdas, 1.5), rtol=0, atol=1e-12)
    for g in np.unique(batch["groups"]):
        mine = batch["groups"] == g
        assert np.allclose(
            np.sort(charges["shuffled"][mine]), np.sort(charges["per-rollout"][mine]), rtol=0, atol=1e-12
        )
    assert np.abs(charges["shuffled"] - charges["per-rollout"]).max() > 0.1  # not the rollouts' own
    again = 1.5 * batch["utility"] - sepo_rewards(*args, "shuffled", rng=np.random.default_rng(7))
    other = 1.5 * batch["utility"] - sepo_rewards(*args, "shuffled", rng=np.random.default_rng(8))
    assert np.array_equal(again, charges["shuffled"]) and not np.array_equal(other, charges["shuffled"])
    permutation = within_group_permutation(batch["groups"], np.random.default_rng(0))
    assert np.array_equal(batch["groups"][permutation], batch["groups"])
    assert sorted(permutation) == list(range(len(permutation)))
    with pytest.raises(ValueError, match="within each group"):
        sepo_rewards(*args, "shuffled", permutation=np.arange(len(permutation))[::-1])


def test_shuffled_expected_advantages_are_payoff_only_over_every_permutation():
    """Averaged over every permutation within the groups (G = 3: 6 each), the unscaled shuffled
    advantages equal payoff-only GRPO's exactly, so the expected update is payoff-only's; the
    per-rollout advantages are not. The reward's spread: each group's charges are SEPO's, and the
    reward's within-group variance averages Var(s·U) + Var(P), SEPO's less its covariance term
    −2·Cov(s·U, P) (the credit itself)."""
    import itertools

    rng = np.random.default_rng(11)
    groups = np.repeat(np.arange(2), 3)
    utility, exploit, collusion, externality = (
        rng.normal(size=6),
        rng.normal(size=6),
        rng.random(6),
        rng.random(6),
    )
    lambdas = Lambdas(e=1.5, c=2.0, x=0.7)
    args = (utility, exploit, collusion, externality, groups, lambdas, 1.5)
    none = group_advantages(sepo_rewards(*args, "none"), groups, "none")
    per = group_advantages(sepo_rewards(*args, "per-rollout"), groups, "none")
    penalty = sepo_penalties(exploit, collusion, externality, lambdas, 1.5)
    mean, variance, count = np.zeros(6), np.zeros(2), 0
    for first, second in itertools.product(itertools.permutations(range(3)), repeat=2):
        permutation = np.array([*first, *(3 + np.array(second))])
        rewards = sepo_rewards(*args, "shuffled", permutation=permutation)
        mean += group_advantages(rewards, groups, "none")
        variance += [rewards[groups == g].var() for g in (0, 1)]
        count += 1
    assert np.allclose(mean / count, none, rtol=0, atol=1e-12)
    assert np.abs(per - none).max() > 0.1
    for g in (0, 1):
        mine = groups == g
        expected = (1.5 * utility[mine]).var() + penalty[mine].var()
        assert np.isclose(variance[g] / count, expected, rtol=0, atol=1e-12)
        sepo = (1.5 * utility[mine] - penalty[mine]).var()
        covariance = np.mean(
            (1.5 * utility[mine] - (1.5 * utility[mine]).mean()) * (penalty[mine] - penalty[mine].mean())
        )
        assert np.isclose(sepo, expected - 2 * covariance, rtol=0, atol=1e-12)


def test_shuffled_needs_a_generator_or_a_permutation():
    with pytest.raises(ValueError, match="random generator"):
        sepo_rewards([1.0, 2.0], [0.1, 0.2], [0.0, 0.0], [0.0, 0.0], [0, 0], Lambdas(e=1.0), 1.5, "shuffled")


def test_rewards_on_a_tiny_example():
    lambdas = Lambdas(e=2.0, c=0.5, x=0.25)
    args = ([1.0, -2.0, 2.0], [0.1, 0.3, -0.2], [0.0, 1.0, 0.5], [0.0, 1.0, 0.0], [0, 0, 1], lambdas, 1.5)
    per_rollout = sepo_rewards(*args, "per-rollout")
    penalty = np.array([2 * 1.5 * 0.1, 2 * 1.5 * 0.3 + 0.5 + 0.25, 2 * 1.5 * -0.2 + 0.25])
    assert np.allclose(per_rollout, 1.5 * np.array([1.0, -2.0, 2.0]) - penalty, atol=1e-15)
    assert np.allclose(sepo_rewards(*args, "none"), [1.5, -3.0, 3.0], atol=1e-15)
    group_penalty = np.array([(penalty[0] + penalty[1]) / 2] * 2 + [penalty[2]])
    assert np.allclose(sepo_rewards(*args, "constant"), [1.5, -3.0, 3.0] - group_penalty, atol=1e-15)


def test_group_advantages_on_a_tiny_example():
    rewards = np.array([1.0, 2.0, 3.0, 10.0, 10.0, 13.0])
    groups = np.array([0, 0, 0, 1, 1, 1])
    centred = np.array([-1.0, 0.0, 1.0, -1.0, -1.0, 2.0])
    assert np.allclose(group_advantages(rewards, groups, "none"), centred, atol=1e-15)
    # per-group population std: sqrt(2/3) and sqrt(2)
    spread = np.array([np.sqrt(2 / 3)] * 3 + [np.sqrt(2)] * 3)
    assert np.allclose(group_advantages(rewards, groups, "group"), centred / (spread + 1e-8), atol=1e-12)
    # one std of the centred rewards over the batch: sqrt(8/6)
    assert np.allclose(
        group_advantages(rewards, groups, "batch"), centred / (np.sqrt(8 / 6) + 1e-8), atol=1e-12
    )
    # order of rollouts and group numbering do not matter
    permutation = np.array([4, 0, 5, 2, 1, 3])
    assert np.allclose(group_advantages(rewards[permutation], groups[permutation], "group"),
                       group_advantages(rewards, groups, "group")[permutation], atol=1e-15)
    # unequal group sizes
    advantages = group_advantages(np.array([1.0, 3.0, 5.0, 5.0, 8.0]), np.array([0, 0, 1, 1, 1]), "none")
    assert np.allclose(advantages, [-1.0, 1.0, -1.0, -1.0, 2.0], atol=1e-15)
    # a zero-variance group has zero advantages
    assert np.allclose(
        group_advantages(np.array([2.0, 2.0, 1.0, 3.0]), np.array([0, 0, 1, 1]), "group")[:2], 0.0
    )


def test_group_advantages_are_invariant_to_a_constant_per_group():
    rng = np.random.default_rng(4)
    rewards, groups = rng.normal(size=40), np.repeat(np.arange(8), 5)
    shift = rng.normal(scale=10, size=8)[groups]
    for scaling in REWARD_SCALINGS:
        assert np.allclose(
            group_advantages(rewards + shift, groups, scaling),
            group_advantages(rewards, groups, scaling),
            atol=1e-12,
        )


@pytest.mark.parametrize("field,value", [("e", -1.0), ("c", -0.1), ("x", -5), ("e", float("nan")),
                                          ("c", float("inf")), ("x", float("nan"))])
def test_lambdas_reject_negative_and_non_finite_values(field, value):
    with pytest.raises(SepoError, match=f"lambda-{field}"):
        Lambdas(**{field: value})


def test_lambdas_accept_zero_and_positive():
    assert Lambdas() == Lambdas(0.0, 0.0, 0.0)
    assert Lambdas(e=5, c=2.4, x=1.8).e == 5


def test_unknown_mode_and_scaling_raise():
    with pytest.raises(SepoError, match="per_rollout"):
        check_penalty_mode("per_rollout")
    with pytest.raises(SepoError, match="constant!"):
        sepo_rewards([1.0], [0.0], [0.0], [0.0], [0], Lambdas(), 1.5, "constant!")
    with pytest.raises(SepoError, match="mean"):
        group_advantages([1.0, 2.0], [0, 0], "mean")


# --------------------------------------------------------------------- attribution (unit)

def test_attribution_is_centred_under_the_policy_and_divided_by_reach():
    rng = np.random.default_rng(5)
    policy = rng.dirichlet([1.0, 1.0], size=12)
    gradient = rng.normal(size=(12, 2))
    reach = rng.random(12) + 0.1
    reach[4] = 0.0
    charge = exploitation_attribution(policy, gradient, reach)
    assert np.allclose((policy * charge).sum(-1), 0.0, atol=1e-15)
    expected = (gradient - (policy * gradient).sum(-1, keepdims=True)) / np.where(reach > 0, reach, 1)[
        :, None
    ]
    expected[4] = 0.0
    assert np.allclose(charge, expected, atol=1e-15)
    assert np.all(np.isfinite(charge))


# ------------------------------------------------------------------- the key property

def train_pool() -> np.ndarray:
    return np.stack([BOTS[name]().table for name in ("NashApprox", "TightPassive", "LooseAggressive")])


def expected_charge_times_score(policy: np.ndarray, opponents: np.ndarray, charge: np.ndarray) -> np.ndarray:
    """E[E_r · ∇θ log P(r)] by exact enumeration: opponent uniform, agent seat 1/2, deal 1/6,
    every action path with its probability. ∇θ log π(a|I) for softmax logits is e_a − π(·|I)."""
    total = np.zeros((12, 2))

    def walk(history, cards, agent_seat, opponent, prob, decisions):
        if is_hand_over(history):
            rollout_charge = sum(charge[row, action] for row, action in decisions)
            score = np.zeros((12, 2))
            for row, action in decisions:
                score[row, action] += 1.0
                score[row] -= policy[row]
            total[:] += prob * rollout_charge * score
            return
        seat = seat_to_act(history)
        row = INFO_STATES.index(f"{cards[seat]}{history}")
        mine = seat == agent_seat
        table = policy if mine else opponent
        for action in (0, 1):
            if table[row, action] == 0.0:
                continue
            walk(history + "pb"[action], cards, agent_seat, opponent, prob * table[row, action],
                 decisions + [(row, action)] if mine else decisions)

    for opponent in opponents:
        for agent_seat in (0, 1):
            for cards in DEALS:
                walk("", cards, agent_seat, opponent, 1.0 / len(opponents) * 0.5 / 6, [])
    return total


def softmax_exploitability_gradient(policy: np.ndarray) -> np.ndarray:
    """∇θ e = Σ_a ∂e/∂π(a|I) π(a|I)(1[a=b] − π(b|I))."""
    g = ke.exploitability_gradient(policy)
    return policy * (g - (policy * g).sum(-1, keepdims=True))


def random_logits(seed):
    return np.random.default_rng(seed).normal(scale=1.0, size=(12, 2))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_expected_charge_times_score_is_the_exploitability_gradient_for_the_trainers_charge(seed, tmp_path):
    from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

    trainer = TabularSEPOTrainer(TabularSEPOConfig(lambda_e=5.0), tmp_path / "run")
    assert np.allclose(trainer.env.opponents, train_pool())
    policy = softmax(random_logits(seed))
    charge = trainer.attribution(policy)
    expected = expected_charge_times_score(policy, trainer.env.opponents, charge)
    target = softmax_exploitability_gradient(policy)
    assert np.abs(target).max() > 1e-2
    assert np.allclose(expected, target, rtol=0, atol=1e-9), np.abs(expected - target).max()


@pytest.mark.parametrize("seed", [10, 11])
def test_key_property_holds_for_any_opponent_pool(seed):
    rng = np.random.default_rng(seed)
    opponents = rng.dirichlet([1.0, 1.0], size=(4, 12))
    policy = softmax(random_logits(seed))
    reach = ke.own_reach(policy) * ke.external_reach(opponents)
    charge = exploitation_attribution(policy, ke.exploitability_gradient(policy), reach)
    expected = expected_charge_times_score(policy, opponents, charge)
    assert np.allclose(expected, softmax_exploitability_gradient(policy), rtol=0, atol=1e-9)


def test_key_property_fails_without_centring_or_without_reach_weighting():
    """The enumeration is sensitive: dropping either ingredient of the charge breaks equality."""
    policy = softmax(random_logits(20))
    opponents = train_pool()
    g = ke.exploitability_gradient(policy)
    reach = ke.own_reach(policy) * ke.external_reach(opponents)
    target = softmax_exploitability_gradient(policy)
    uncentred = g / reach[:, None]
    unweighted = g - (policy * g).sum(-1, keepdims=True)
    for charge in (uncentred, unweighted):
        assert np.abs(expected_charge_times_score(policy, opponents, charge) - target).max() > 1e-4
