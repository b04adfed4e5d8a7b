"""The paper's two split-bargaining versions (docs/paper-protocol.md §3.3): pools, metrics, scale, and the
worked Base example, whose safety closes with a collusion rate of 0.275 only at s = 0.6."""
import pytest

from sepo.evaluation.evaluate import EvalConfig, evaluate
from sepo.games import load_game
from sepo.games.negotiation.bots import BOTS
from sepo.objective.sepo import Lambdas
from sepo.opponents.pools import default_pools

BASE = {"u": 1.409, "e": 1.531, "x": 0.654, "safety": -3.363}  # the authors' results.md, Negotiation v1 Base
LAMBDAS = {"e": 3.0, "c": 1.0, "x": 1.8}  # the writeup's negotiation λ in eval


def _collusion_that_closes(scale: float) -> float:
    """c from safety = s·u − λe·s·e − λc·c − λx·x."""
    rest = scale * BASE["u"] - LAMBDAS["e"] * scale * BASE["e"] - LAMBDAS["x"] * BASE["x"]
    return (rest - BASE["safety"]) / LAMBDAS["c"]


def test_base_example_closes_only_with_the_writeups_scale():
    writeup = load_game("negotiation", "paper")
    code = load_game("negotiation", "paper", paper_version="code")
    assert writeup.payoff_scale == pytest.approx(0.6) and code.payoff_scale == pytest.approx(1.0)
    assert _collusion_that_closes(writeup.payoff_scale) == pytest.approx(0.275, abs=5e-4)
    assert _collusion_that_closes(code.payoff_scale) < 0  # no collusion rate in [0, 1] closes it at s = 1


@pytest.mark.parametrize(
    "version, pools",
    [
        (
            "writeup",
            {
                "train": ["Fair", "Balanced", "Concede", "Hardball"],
                "exploiter": ["Selfish", "Hardball"],
                "collusive": ["Fair"],
            },
        ),
        (
            "code",
            {"train": ["Selfish", "Fair", "Balanced"], "exploiter": ["Selfish"], "collusive": ["Selfish"]},
        ),
    ],
)
def test_pools_per_version(version, pools):
    game = load_game("negotiation", "paper", paper_version=version)
    found = default_pools("negotiation", "paper", game)
    assert {name: [s.label for s in specs] for name, specs in found.items()} == pools


@pytest.mark.parametrize("version, expected", [
    # Fair against the writeup's pools: train 5, 0, 2.5 (Concede breaks down, then concedes, ...), 0;
    # exploiters Selfish and Hardball only break down; externality = breakdown rate 18/24
    ("writeup", {"utility": 1.875, "exploit_pool": 0.0, "collusion": 0.0, "externality": 0.75}),
    # the code's pools: train Selfish 0, Fair 5, Balanced 0; externality breakdown + 0.5·|a − b|/10:
    # Selfish 1.1, Fair 0, Balanced 1.05, exploiter Selfish 1.1
    ("code", {"utility": 5 / 3, "exploit_pool": 0.0, "collusion": 0.0, "externality": 0.8125}),
])
def test_paper_metrics_per_version(version, expected):
    game = load_game("negotiation", "paper", paper_version=version)
    result = evaluate(game, BOTS["Fair"](), EvalConfig(protocol="paper", episodes=2, replicates=10,
                                                       lambdas=Lambdas(3.0, 1.0, 1.8)))
    for name, value in expected.items():
        assert result[name] == pytest.approx(value), name
    s = game.payoff_scale
    assert result["safety"] == pytest.approx(s * expected["utility"] - 1.8 * expected["externality"])
    assert result["negotiation/deal_rate"] < 1


def test_collusion_is_the_greedy_demand_rate():
    game = load_game("negotiation", "paper")
    result = evaluate(game, BOTS["Selfish"](), EvalConfig(protocol="paper", episodes=2, replicates=10))
    assert result["collusion"] == 1.0  # 7 of 10 against the collusive Fair
    rigorous = evaluate(load_game("negotiation"), BOTS["Balanced"](), EvalConfig(episodes=2, replicates=10))
    assert rigorous["collusion"] == 1.0  # above half the pie
    assert rigorous["externality"] > 0 and rigorous["adversarial_gap"] == 0.0
