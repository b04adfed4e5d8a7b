"""The language-model training environment: the fixed-deal solver is exact (the DP agrees, the
gradient is the derivative), payoffs to go are exact for the paper's bots (Monte Carlo agrees)."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import load_game
from sepo.games.negotiation_gt.exact import DPSearch
from sepo.games.negotiation_gt.llm_env import NegotiationLLMEnvironment
from sepo.opponents.pools import parse_bot
from sepo.policies.base import Policy


def _env(**params):
    game = load_game("negotiation-gt", items="2,2,3", values="4,3,3", **params)
    specs = [parse_bot("negotiation-gt", b) for b in ("FairNeg", "TFTNeg", "ConcedeNeg")]
    return NegotiationLLMEnvironment(game, specs, specs[:1])


class PerRound(Policy):
    memory, reads = 0, ("own", "other")

    def __init__(self, table):
        self.table = table

    def action_probabilities(self, decision):
        return {a: float(p) for a, p in zip(decision.legal_actions, self.table[decision.observation["round"] - 1])}


def test_fixed_deal_solver_agrees_with_the_dp_and_its_gradient_is_the_derivative():
    env = _env()
    solver, rng = env.solver, np.random.default_rng(0)
    table = rng.dirichlet(np.ones(len(solver.A)), size=4)
    search = DPSearch(env.game, 0)
    search.expand(PerRound(table))
    assert solver.evaluate(table).value == pytest.approx(search.solve()["gap"], abs=1e-9)
    direction = rng.normal(size=table.shape)
    direction -= direction.mean(1, keepdims=True)
    numeric = (solver.evaluate(table + 1e-6 * direction).value - solver.evaluate(table - 1e-6 * direction).value) / 2e-6
    assert numeric == pytest.approx(float((solver.gradient(table) * direction).sum()), abs=1e-5)
    assert len(solver.decisions()) == 4


@pytest.mark.parametrize("index", [0, 1, 2])
def test_exact_payoff_to_go_matches_sampled_continuations(index):
    env = _env()
    table = np.random.default_rng(1).dirichlet(np.ones(len(env.solver.A)), size=4)
    contexts = env.sample_contexts(table, 8, np.random.default_rng(2))[1:2]
    for context in contexts:
        context.opponent_index = index
        decision = env.training_decision(context, None)
        action = decision.legal_actions[7]
        exact = env.outcome(table, context, decision, action)[0]
        state = context.state.clone()
        bot = env.bots[index]
        state.apply_actions((action, bot.act([state.decision(1)], np.random.default_rng(0))[0].action))
        unread = type("Unread", (), {"act": bot.act})()  # no declared memory: the sampled path
        sampled = state.rounds()[-1].payoffs[0] + env._to_go(table, state, unread, np.random.default_rng(3), samples=1500)
        assert exact == pytest.approx(sampled, abs=1.5)


def test_training_needs_a_fixed_deal():
    with pytest.raises(SepoError, match="needs a fixed deal"):
        NegotiationLLMEnvironment(load_game("negotiation-gt"), [parse_bot("negotiation-gt", "FairNeg")], [])


@pytest.mark.slow
def test_llm_sepo_smoke(tmp_path):
    """`sepo data sft`, `sepo sft` and `sepo train --policy hf:` on the tiny model, end to end."""
    pytest.importorskip("trl")
    from sepo.models.tiny import init_tiny_model
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo
    from sepo.training.sft import SFTRunConfig, run_sft
    from sepo.training.sft_data import generate_traces, write_sft_dataset

    params = {"items": "1,2,1", "values": "4,3,3"}
    tiny = init_tiny_model(tmp_path / "tiny", seed=0)
    write_sft_dataset(generate_traces("negotiation-gt", "paper", 5, 0, **params), tmp_path / "data", 0)
    model = run_sft(SFTRunConfig(model=str(tiny), data=str(tmp_path / "data"), epochs=1, learning_rate=3e-3), tmp_path / "sft").model
    summary = run_llm_sepo(LLMSEPOConfig(model=str(model), game="negotiation-gt", game_params=params, steps=2, groups=2,
                                         group_size=2, seed=0, lambda_e=1.0), tmp_path / "run")
    assert summary["steps"] == 2 and summary["adversarial_gap"] >= 0
