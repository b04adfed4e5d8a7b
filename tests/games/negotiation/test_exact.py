"""Split bargaining's exact solver: the paper bots' values, brute force over every deterministic
opponent strategy in 2 rounds, memory states against the full tree, the playing best response."""
import itertools

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.negotiation.bots import BOTS
from sepo.games.negotiation.exact import NegotiationSolver
from sepo.metrics.exact import action_table
from sepo.policies.base import Policy
from sepo.policies.tabular import TabularPolicy

# (bot, adversarial gap per round, best-response payoff per round) at the paper's 4 rounds. A bot
# that demands at least half the pie cannot be out-earned: the opponent either takes the rest (less)
# or breaks the round down (0 each), so every paper bot's exact gap is 0; the best responder earns
# what the bot leaves (Concede: 4 a round; breaking down to make it concede to 5 costs a round).
PAPER_VALUES = [
    ("Fair", 0.0, 5.0),
    ("Balanced", 0.0, 4.0),
    ("Selfish", 0.0, 3.0),
    ("Hardball", 0.0, 2.0),
    ("Concede", 0.0, 4.0),
]


@pytest.mark.parametrize("bot, gap, br", PAPER_VALUES)
def test_paper_bots_four_rounds(bot, gap, br):
    solver = NegotiationSolver(load_game("negotiation", "paper"))
    result = solver.evaluate(action_table(BOTS[bot](), solver.decisions()))
    assert result.value == pytest.approx(gap, abs=1e-12) and result.br_payoff == pytest.approx(br, abs=1e-12)
    assert result.exact and result.pruning_bound == 0.0


def _brute_force(game, agent):
    """max over every deterministic opponent plan (round-1 demand, round-2 demand for each agent
    round-1 demand it can meet) of E[u_O − u_A] and of E[u_O], by playing the rules exactly."""
    first = agent.action_probabilities(game.new_initial_state().decision(0))
    support = [a for a, p in first.items() if p > 0]
    k = game.num_demands
    best_gap = best_br = -np.inf
    for o1 in range(k):
        for reply in itertools.product(range(k), repeat=len(support)):
            plan = dict(zip(support, reply))
            gap = br = 0.0
            for a1 in support:
                state = game.new_initial_state()
                state.apply_actions((a1, o1))
                for a2, p2 in agent.action_probabilities(state.decision(0)).items():
                    if p2 == 0:
                        continue
                    child = state.clone()
                    child.apply_actions((a2, plan[a1]))
                    mine, theirs = child.returns()
                    gap += first[a1] * p2 * (theirs - mine)
                    br += first[a1] * p2 * theirs
            best_gap, best_br = max(best_gap, gap / 2), max(best_br, br / 2)
    return best_gap, best_br


@pytest.mark.parametrize(
    "bot",
    ["Fair", "Balanced", "Selfish", "Hardball", "Concede", "ConcedeStep", "Complement", "ReciprocalBalanced"],
)
def test_dp_equals_brute_force_over_two_rounds(bot):
    game = load_game("negotiation", "paper", rounds=2, memory="full")
    solver = NegotiationSolver(game)
    result = solver.evaluate(action_table(BOTS[bot](), solver.decisions()))
    gap, br = _brute_force(game, BOTS[bot]())
    assert result.value == pytest.approx(gap, abs=1e-12) and result.br_payoff == pytest.approx(br, abs=1e-12)


@pytest.mark.parametrize("seed, cost", [(0, 0.0), (1, 0.0), (2, 1.5)])
def test_dp_equals_brute_force_for_stochastic_agents(seed, cost):
    """Every deterministic opponent strategy of a 2-round game with demands 1..3 over a pie of 4 (81)."""
    game = load_game("negotiation", pie=4, max_demand=3, rounds=2, memory="full", breakdown_cost=cost)
    solver = NegotiationSolver(game)
    table = np.random.default_rng(seed).dirichlet(np.ones(3), size=len(solver.keys))
    result = solver.evaluate(table)
    gap, br = _brute_force(game, TabularPolicy(table, solver.keys))
    assert (
        result.value > 0
        and result.value == pytest.approx(gap, abs=1e-12)
        and result.br_payoff == pytest.approx(br, abs=1e-12)
    )


def test_memory_states_agree_with_the_full_tree_for_memory_one_policies():
    short, full = (
        NegotiationSolver(load_game("negotiation", rounds=3)),
        NegotiationSolver(load_game("negotiation", rounds=3, memory="full")),
    )
    table = np.random.default_rng(3).dirichlet(np.full(9, 0.5), size=len(short.keys))
    rows = np.array([short.keys.index(d.info_key.split(",")[-1]) for d in full.decisions()])
    a, b = short.evaluate(table), full.evaluate(table[rows])
    assert a.value == pytest.approx(b.value, abs=1e-12) and a.br_payoff == pytest.approx(
        b.br_payoff, abs=1e-12
    )
    summed = np.zeros_like(table)
    np.add.at(summed, rows, full.gradient(table[rows]))
    assert np.allclose(summed, short.gradient(table), atol=1e-12)


def test_best_response_plays_and_earns_the_gap():
    game = load_game("negotiation", breakdown_cost=1.0)
    solver = NegotiationSolver(game)
    for bot in ("Uniform", "RandomMiddle", "ConcedeStep"):
        table = action_table(BOTS[bot](), solver.decisions())
        result = solver.evaluate(table)
        response = solver.best_response(table)
        seeds = list(range(300))
        played = play_episodes(game, BOTS[bot](), [response] * len(seeds), seeds, agent_seed=0)
        lead = np.array([(e.opponent_payoffs - e.agent_payoffs).mean() for e in played])
        assert lead.mean() == pytest.approx(result.value, abs=4 * lead.std() / np.sqrt(len(seeds)) + 1e-12), (
            bot
        )
    rows = response.to_json()
    assert rows[0] == {"round": 1, "history": "", "action": rows[0]["action"]} and "-" in rows[1]["history"]


def test_pruned_reading_stays_within_its_bound():
    game = load_game("negotiation", pie=6, max_demand=5, rounds=3, memory="full")
    solver = NegotiationSolver(game)
    table = np.random.default_rng(1).dirichlet(np.full(5, 0.3), size=len(solver.keys))
    exact = solver.evaluate(table)
    pruned, response = solver.evaluate_agent(TabularPolicy(table, solver.keys), threshold=0.05)
    assert 0 < pruned.pruning_bound and abs(pruned.value - exact.value) <= pruned.pruning_bound
    assert pruned.extra["states"] < exact.extra["states"] and response.to_json()


def test_audit_follows_what_the_agent_declares():
    """A bot is solved on its own state (exact at 12 rounds), a memory-1 table on its
    keys (pruning it is refused in one line), an undeclared agent on the whole tree unless a
    projection is asked for, which is then labelled."""
    long = NegotiationSolver(load_game("negotiation", rounds=12)).audit(BOTS["Concede"]())
    assert (
        long.result.exact
        and long.result.value == pytest.approx(0.0)
        and "declared state" in long.result.method
    )

    game = load_game("negotiation", rounds=2)
    solver = NegotiationSolver(game)
    table = np.full((len(solver.keys), game.num_demands), 1.0 / game.num_demands)
    with pytest.raises(SepoError, match="--threshold needs the full history tree"):
        solver.audit(TabularPolicy(table, solver.keys), threshold=0.01)

    class Undeclared(Policy):
        name = "undeclared"

        def action_probabilities(self, decision):
            return BOTS["Complement"]().action_probabilities(decision)

    whole = solver.audit(Undeclared()).result
    truth = solver.audit(BOTS["Complement"]()).result
    assert (
        whole.exact
        and whole.value == pytest.approx(truth.value, abs=1e-12)
        and "joint-demand tree" in whole.method
    )
    projected = solver.audit(Undeclared(), projection=True).result
    assert not projected.exact and projected.extra["projection_memory"] == 1


def test_a_text_agent_over_the_prompt_limit_is_refused_before_its_tree_is_built():
    """The whole 4-round tree's 538,084 prompts are counted, not built (building them took 30 s
    before the refusal); `sepo eval` and `sepo exploit` share this audit."""
    solver = NegotiationSolver(load_game("negotiation", memory="full"))

    class Text(Policy):
        name = "text"

        def action_probabilities(self, decision):
            raise AssertionError("read before the refusal")

        estimate = action_probabilities

    with pytest.raises(SepoError, match="538,084 information states of 4 rounds.*--memory M"):
        solver.audit(Text())
    assert solver._keys is None
