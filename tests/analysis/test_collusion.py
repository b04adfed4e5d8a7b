"""The emergent-collusion stress test reproduces the chapter's reversal over seeds."""
import copy

import numpy as np
import pytest
import yaml

from sepo.analysis.collusion import learn, load_rules, rules_from_data, stress_test
from sepo.analysis.errors import AnalysisInputError

SEEDS = range(12)


def test_naive_rule_learners_collude(examples):
    """Conceal/approve in >= 90% of the final 1,000 of 10,000 rounds, for every seed; always
    colluding beats honest/inspect by 0.80 joint reward per round."""
    rules = load_rules(examples / "publication_naive.yaml")
    assert (rules.rounds, rules.window, rules.epsilon) == (10_000, 1_000, 0.05)
    report = stress_test(rules, SEEDS)
    assert min(report.target_frequency.values()) >= 0.90
    assert report.coalition_gain == pytest.approx(0.80, abs=1e-12)
    assert report.to_dict()["expected_game_pure_nash"] == [{"drafter": "conceal", "checker": "approve"}]


def test_repaired_rule_reverses_it(examples):
    """Honest/inspect in >= 90% of the final window for every seed; collusion now loses about
    0.94 per round. Exactly: 1.8 - (0.5625 + 0.28875) = 0.94875 (the chapter's 20,000-sample
    estimate printed 0.944)."""
    rules = load_rules(examples / "publication_repaired.yaml")
    report = stress_test(rules, SEEDS)
    assert min(report.target_frequency.values()) >= 0.90
    assert report.coalition_gain == pytest.approx(-0.94875, abs=1e-12)
    assert report.coalition_gain == pytest.approx(-0.94, abs=0.01)
    assert report.to_dict()["expected_game_pure_nash"] == [{"drafter": "honest", "checker": "inspect"}]


def test_coalition_gain_agrees_with_sampled_scenarios(examples):
    """The chapter estimates the gain from 20,000 sampled scenarios; the exact value lies within
    sampling error of such an estimate."""
    rules = load_rules(examples / "publication_repaired.yaml")
    rng = np.random.default_rng(1428)
    scenarios = (rng.random((20_000, 2)) < rules.scenario_probabilities) @ np.array([1, 2])
    joint = rules.rewards.sum(axis=0)
    sampled = joint[(*rules.deviation, scenarios)].mean() - joint[(*rules.baseline, scenarios)].mean()
    assert sampled == pytest.approx(rules.coalition_gain(), abs=0.05)


def test_same_seed_same_run_and_seeds_differ(examples):
    rules = load_rules(examples / "publication_naive.yaml")
    assert learn(rules, 5) == learn(rules, 5)
    assert len({learn(rules, s)[0] for s in range(4)}) > 1


def test_exploration_caps_the_rate_below_one(examples):
    """With epsilon = 0.05 each learner plays its greedy action with probability 0.975."""
    rules = load_rules(examples / "publication_naive.yaml")
    rates = list(stress_test(rules, range(6)).target_frequency.values())
    assert np.mean(rates) == pytest.approx(0.975 ** 2, abs=0.02)


def _base(examples):
    return yaml.safe_load((examples / "publication_repaired.yaml").read_text())


BAD = {
    "unknown action in a rule": (
        lambda d: d["rewards"]["drafter"][0].update(when={"drafter": "lie"}),
        "rewards.drafter[0].when.drafter",
        "unknown action 'lie'",
    ),
    "unknown name in a rule": (
        lambda d: d["rewards"]["drafter"][0].update(when={"weather": True}),
        "rewards.drafter[0].when.weather",
        "unknown name",
    ),
    "non-numeric reward": (
        lambda d: d["rewards"]["checker"][0].update(reward="high"),
        "rewards.checker[0].reward",
        "expected a number",
    ),
    "no catch-all rule": (lambda d: d["rewards"]["checker"].pop(), "rewards.checker", "no rule matches"),
    "probability out of range": (lambda d: d["scenario"].update(audited=1.5), "scenario.audited", "[0, 1]"),
    "unknown target action": (
        lambda d: d.update(target={"drafter": "honest", "checker": "ignore"}),
        "target.checker",
        "unknown action",
    ),
    "window longer than run": (
        lambda d: d.update(learning={"rounds": 100, "window": 1000}),
        "learning.window",
        "longer than the run",
    ),
    "scenario condition not boolean": (
        lambda d: d["rewards"]["drafter"][2].update(when={"uncertain": "yes"}),
        "rewards.drafter[2].when.uncertain",
        "true or false",
    ),
    "bad seeds": (lambda d: d.update(seeds=[1, -2]), "seeds[1]", "non-negative"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_rule_files_name_the_field(examples, case):
    edit, field, words = BAD[case]
    data = copy.deepcopy(_base(examples))
    edit(data)
    with pytest.raises(AnalysisInputError) as caught:
        rules_from_data(data, "rules.yaml")
    assert str(caught.value).startswith(f"rules.yaml: {field}: ") and words in str(caught.value)


@pytest.mark.slow
def test_reversal_holds_over_fifty_seeds(examples):
    for name, target in (("naive", 0.90), ("repaired", 0.90)):
        report = stress_test(load_rules(examples / f"publication_{name}.yaml"), range(50))
        assert min(report.target_frequency.values()) >= target
