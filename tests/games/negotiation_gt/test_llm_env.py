"""The language-model training environment: the fixed-deal solver is exact (the DP agrees, the
gradient is the derivative), payoffs to go are exact for the paper's bots (Monte Carlo agrees),
and over random deals each step focuses on drawn deals whose per-deal gap is the full solver's."""
import numpy as np
import pytest

from sepo.games import load_game
from sepo.games.credit import Charges
from sepo.games.negotiation_gt.bots import NegotiationBot
from sepo.games.negotiation_gt.exact import DPSearch
from sepo.games.negotiation_gt.llm_env import NegotiationLLMEnvironment
from sepo.opponents.pools import parse_bot
from sepo.policies.base import Policy


def _env(**params):
    params = {"items": "2,2,3", "values": "4,3,3", **params}
    game = load_game("negotiation-gt", **{k: v for k, v in params.items() if v is not None})
    specs = [parse_bot("negotiation-gt", b) for b in ("FairNeg", "TFTNeg", "ConcedeNeg")]
    return NegotiationLLMEnvironment(game, specs, specs[:1], (), Charges(collusion=True, externality=True))


class PerRound(Policy):
    memory, reads = 0, ("own", "other")

    def __init__(self, table):
        self.table = table

    def action_probabilities(self, decision):
        return {
            a: float(p) for a, p in zip(decision.legal_actions, self.table[decision.observation["round"] - 1])
        }


def test_fixed_deal_solver_agrees_with_the_dp_and_its_gradient_is_the_derivative():
    env = _env()
    solver, rng = env.solver, np.random.default_rng(0)
    table = rng.dirichlet(np.ones(solver.width), size=4)
    search = DPSearch(env.game, 0)
    search.expand(PerRound(table))
    assert solver.evaluate(table).value == pytest.approx(search.solve()["gap"], abs=1e-9)
    direction = rng.normal(size=table.shape)
    direction -= direction.mean(1, keepdims=True)
    numeric = (
        solver.evaluate(table + 1e-6 * direction).value - solver.evaluate(table - 1e-6 * direction).value
    ) / 2e-6
    assert numeric == pytest.approx(float((solver.gradient(table) * direction).sum()), abs=1e-5)
    assert len(solver.decisions()) == 4


def _table(env, seed):
    legal = env.solver.legal_mask()
    table = np.where(legal, np.random.default_rng(seed).gamma(1.0, size=legal.shape), 0.0)
    return table / table.sum(1, keepdims=True)


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("deals", ["fixed", "random"])
def test_exact_payoff_to_go_matches_sampled_continuations(index, deals):
    env = _env() if deals == "fixed" else _env(items=None, values=None)
    env.focus(np.random.default_rng(5), 3)
    table = _table(env, 1)
    contexts = env.sample_contexts(table, 8, np.random.default_rng(2))[1:2]
    for context in contexts:
        context.opponent_index = index
        decision = env.training_decision(context, None)
        action = decision.legal_actions[7]
        exact = np.array(env.outcome(table, context, decision, action))
        state = context.state.clone()
        bot = env.bots[index]
        state.apply_actions((action, bot.act([state.decision(1)], np.random.default_rng(0))[0].action))
        unread = type("Unread", (), {"act": bot.act})()  # no declared memory: the sampled path
        sampled = env._round(state) + env._to_go(
            table, state, unread, np.random.default_rng(3), context.deal, samples=1500
        )
        mixture = env.mixture  # each term scaled by the opponent's credit for it (sepo.games.credit)
        sampled *= [mixture.utility[index], mixture.collusion[index], mixture.externality[index]]
        assert exact == pytest.approx(sampled, abs=1.5)
        assert exact[1:] == pytest.approx(sampled[1:], abs=0.15)  # events to go: counts over at most 4 rounds


def test_random_deals_focus_on_drawn_deals_whose_gap_is_the_full_solvers():
    from sepo.games.negotiation_gt.deals import DealSolver

    env = _env(items="2,2,3", values=None)
    full = DealSolver(env.game)
    assert not env.fixed and len(full.deals) == 36
    assert env.focus(np.random.default_rng(0), 12) and not _env().focus(np.random.default_rng(0), 12)
    solver = env.solver
    counts = np.array([w for _, _, w in solver.deals])
    assert counts.sum() == 12 and len(solver.decisions()) == 4 * len(solver.deals)
    table = _table(env, 3)
    where = [
        next(i for i, (p, v, _) in enumerate(full.deals) if (p, v) == (pool, values))
        for pool, values, _ in solver.deals
    ]
    full_table = _table(type("E", (), {"solver": full})(), 4)
    for k, i in enumerate(where):
        full_table[i * 4:(i + 1) * 4] = table[k * 4:(k + 1) * 4]
    per_deal = full._solve(full_table)["gap"].reshape(-1, 4).sum(1) / 4
    assert solver.evaluate(table).value == pytest.approx(float(counts @ per_deal[where] / counts.sum()))
    contexts = env.sample_contexts(table, 40, np.random.default_rng(1))
    assert {c.deal for c in contexts} <= set(range(len(solver.deals)))
    assert all(c.info_row == solver.row(c.deal, len(c.state.rounds())) for c in contexts)
    assert all(
        env.training_decision(c, None).observation["pool"] == solver.deals[c.deal][0] for c in contexts
    )
    reach = env.training_reach(table)
    assert reach.shape == (len(solver.decisions()),) and reach.sum() == pytest.approx(4.0)
    # the final measurement: every deal
    assert env.focus(np.random.default_rng(0), None) and len(env.solver.deals) == 36


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
    model = run_sft(
        SFTRunConfig(model=str(tiny), data=str(tmp_path / "data"), epochs=1, learning_rate=3e-3),
        tmp_path / "sft",
    ).model
    summary = run_llm_sepo(
        LLMSEPOConfig(
            model=str(model),
            game="negotiation-gt",
            game_params=params,
            steps=2,
            groups=2,
            group_size=2,
            seed=0,
            lambda_e=1.0,
        ),
        tmp_path / "run",
    )
    assert summary["steps"] == 2 and summary["adversarial_gap"] >= 0


@pytest.mark.slow
def test_llm_sepo_over_random_deals(tmp_path):
    """Two SEPO-GRPO steps of the tiny model over random pools and values: each step reads the
    model at the drawn deals only, the logged gap is the focused solver's on the logged table."""
    pytest.importorskip("trl")
    import json

    from sepo.models.tiny import init_tiny_model
    from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

    tiny = init_tiny_model(tmp_path / "tiny", seed=0)
    params = {"rounds": 2, "pool_max": 2, "total": 4}  # 8 pools x 3 value vectors
    summary = run_llm_sepo(
        LLMSEPOConfig(
            model=str(tiny),
            game="negotiation-gt",
            game_params=params,
            steps=2,
            groups=2,
            group_size=2,
            seed=0,
            lambda_e=1.0,
            table_samples=4,
            final_samples=2,
            max_new_tokens=12,
        ),
        tmp_path / "run",
    )
    assert summary["steps"] == 2 and summary["adversarial_gap"] >= summary["gap_lower_bound"] >= 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "table" in r and not r.get("final")]
    assert steps and all(len(r["table"]) in (2, 4) for r in steps)  # one or two deals drawn, two rounds each
    final = [r for r in records if r.get("final")][0]
    assert len(final["table"]) == 24 * 2 and final["deals"] == 24  # every deal


def _mix(*weighted):
    """A demand distribution from (demand, probability) pairs, equal demands merged."""
    out: dict = {}
    for demand, p in weighted:
        out[tuple(demand)] = out.get(tuple(demand), 0.0) + p
    return out


class Coin(NegotiationBot):
    """Memory 0: the whole pool with probability 0.7, half of it otherwise."""

    name, classifier = "Coin", {"stochastic": True, "uses_values": False, "reacts": False}

    def demand(self, obs):
        return tuple(obs["pool"])

    def demand_distribution(self, decision):
        pool = decision.observation["pool"]
        return _mix((pool, 0.7), ([p // 2 for p in pool], 0.3))


class Wavering(NegotiationBot):
    """Reads the other's last demand: leaves it what it left (0.6) or demands the whole pool (0.4)."""

    name, memory, reads = "Wavering", 1, ("other",)
    classifier = {"stochastic": True, "uses_values": False, "reacts": True}

    def demand(self, obs):
        return tuple(obs["pool"])

    def demand_distribution(self, decision):
        obs = decision.observation
        pool, history = obs["pool"], obs["history"]
        left = [p - o for p, o in zip(pool, history[-1][1])] if history else [p // 2 for p in pool]
        return _mix((left, 0.6), (pool, 0.4))


class Valuer(NegotiationBot):
    """Memory 0, reads its current values: the items it values most (0.5) or nothing (0.5)."""

    name, classifier = "Valuer", {"stochastic": True, "uses_values": True, "reacts": False}

    def demand(self, obs):
        return tuple(obs["pool"])

    def demand_distribution(self, decision):
        obs = decision.observation
        best = max(obs["values"])
        return _mix(
            ([p if v == best else 0 for p, v in zip(obs["pool"], obs["values"])], 0.5),
            ([0] * len(obs["pool"]), 0.5),
        )


@pytest.mark.parametrize("bot", [Coin, Wavering, Valuer])
@pytest.mark.parametrize("protocol, params", [
    ("rigorous", {"rounds": 3, "items": "1,1,1", "values": "4,3,3", "opponent_values": "2,4,4"}),
    # the opponent's values redrawn each round
    ("paper", {"rounds": 2, "items": "1,1,1", "total": 4, "values": "2,1,1"}),
])
def test_outcome_is_the_expectation_over_a_stochastic_bots_replies(bot, protocol, params):
    """At every decision and demand: the payoff and events to go are those of the whole tree (the
    bot's every reply, every redraw of its values, the agent's table afterwards). The outcome used
    the bot's most likely reply, exact for deterministic bots only."""
    from sepo.games import get_domain
    from sepo.games.negotiation_gt.llm_env import DecisionContext
    from tests.training.exact_updates import expand, to_go

    game = get_domain("negotiation-gt").game(protocol, **params)
    env = NegotiationLLMEnvironment(game, [parse_bot("negotiation-gt", "FairNeg")], [])
    env.bots = [bot()]
    env.mixture.collusion[0] = env.mixture.externality[0] = 1.0  # both events charged, uncredited
    table = _table(env, 7)
    events = get_domain("negotiation-gt").events
    checked = []

    def row(decision):
        return env.solver.row(0, decision.observation["round"] - 1)

    def check(node):
        context = DecisionContext(row(node.state.decision(0)), 0, node.state.clone(), 0)
        decision = env.training_decision(context, None)
        for action in decision.legal_actions:
            expected = to_go(game, events, node, env.bots[0], table, row, action)
            assert np.array(env.outcome(table, context, decision, action)) == pytest.approx(
                expected, abs=1e-9
            ), (node.history, action)
        checked.append(len(node.history))

    expand(game, table, row, env.bots, (0,), visit=check)
    assert set(checked) == set(range(params["rounds"]))
