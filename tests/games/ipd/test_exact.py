"""The IPD's exact solver: the paper's values, Axelrod agents, memory states, the playing best response,
pruning."""

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.ipd.bots import BOTS
from sepo.games.ipd.exact import IPDSolver
from sepo.metrics.exact import action_table, solver_for
from sepo.policies.base import Policy
from sepo.policies.tabular import TabularPolicy


@pytest.fixture(scope="module")
def solver():
    return IPDSolver(load_game("ipd", "paper"))


@pytest.mark.parametrize(
    "bot, gap, br",
    [
        ("AlwaysDefect", 0.0, 1.0),
        ("AlwaysCooperate", 5.0, 5.0),
        ("TFT", 0.625, 3.25),
        ("GrimTrigger", 0.625, 3.25),
        ("AlternatingDefect", 2.5, 3.0),
    ],
)
def test_paper_values_eight_rounds(solver, bot, gap, br):
    result = solver.evaluate(action_table(BOTS[bot](), solver.decisions()))
    assert result.value == pytest.approx(gap, abs=1e-12) and result.br_payoff == pytest.approx(br, abs=1e-12)
    assert result.exact and result.pruning_bound == 0.0


def test_generous_tft_gap(solver):
    # always defecting: 5 in round 1, then GTFT still cooperates with probability 1/4: 1/4 · 5 per round
    result = solver.evaluate(action_table(BOTS["GenerousTFT"](), solver.decisions()))
    assert result.value == pytest.approx((5 + 7 * 1.25) / 8, abs=1e-12)


def test_axelrod_agents_read_exactly():
    pytest.importorskip("axelrod")
    from sepo.games.ipd.axelrod_bots import AxelrodPlayer

    solver = IPDSolver(load_game("ipd", rounds=5))
    ours = solver.evaluate(action_table(BOTS["TFT"](), solver.decisions()))
    theirs = solver.evaluate(action_table(AxelrodPlayer("TitForTat"), solver.decisions()))
    assert theirs.value == ours.value and theirs.br_payoff == ours.br_payoff
    stochastic = solver.evaluate(action_table(AxelrodPlayer("GTFT", p=0.25), solver.decisions()))
    assert stochastic.value == pytest.approx(
        solver.evaluate(action_table(BOTS["GenerousTFT"](), solver.decisions())).value
    )
    with pytest.raises(SepoError, match="cannot be read exactly"):
        action_table(AxelrodPlayer("ForgetfulFoolMeOnce"), solver.decisions())


def test_memory_states_agree_with_the_full_tree_for_memory_policies():
    full, short = IPDSolver(load_game("ipd")), IPDSolver(load_game("ipd", memory=2))
    rng = np.random.default_rng(0)
    table = rng.dirichlet([1, 1], size=len(short.keys))
    memory_policy = TabularPolicy(table, short.keys)
    long_table = np.array(
        [memory_policy.table[short.keys.index(_last2(d.info_key))] for d in full.decisions()]
    )
    a, b = short.evaluate(table), full.evaluate(long_table)
    assert a.value == pytest.approx(b.value, abs=1e-12) and a.br_payoff == pytest.approx(
        b.br_payoff, abs=1e-12
    )
    grad_short = short.gradient(table)
    grad_full = full.gradient(long_table)
    rows = np.array([short.keys.index(_last2(d.info_key)) for d in full.decisions()])
    summed = np.zeros_like(grad_short)
    np.add.at(summed, rows, grad_full)
    assert np.allclose(summed, grad_short, atol=1e-12)


def _last2(key):
    return key if key == "start" else ",".join(key.split(",")[-2:])


def test_best_response_plays_and_earns_the_gap():
    game = load_game("ipd")
    solver = solver_for(game)
    for bot in ("TFT", "GrimTrigger", "AlternatingDefect"):
        table = action_table(BOTS[bot](), solver.decisions())
        result = solver.evaluate(table)
        episode = play_episodes(game, BOTS[bot](), [solver.best_response(table)], [0], agent_seed=0)[0]
        gap = (episode.opponent_payoffs.sum() - episode.agent_payoffs.sum()) / game.rounds
        assert gap == pytest.approx(result.value, abs=1e-12)


def test_pruned_reading_reads_fewer_prompts_within_its_bound():
    game = load_game("ipd", rounds=6)
    solver = IPDSolver(game)
    rng = np.random.default_rng(1)
    table = np.clip(rng.dirichlet([0.3, 0.3], size=len(solver.keys)), 0.0, 1.0)
    agent = TabularPolicy(table, solver.keys)
    calls = []
    original = agent.batch_action_probabilities
    agent.batch_action_probabilities = lambda decisions: calls.append(len(decisions)) or original(decisions)
    exact = solver.evaluate(table)
    pruned, response = solver.evaluate_agent(agent, threshold=0.02)
    assert len(calls) == game.rounds and sum(calls) < len(solver.keys)
    assert 0 < pruned.pruning_bound and abs(pruned.value - exact.value) <= pruned.pruning_bound
    assert not pruned.exact and "pruned" in pruned.method and response.to_json()


def test_best_response_table_reads_as_rounds_histories_and_moves():
    game = load_game("ipd", rounds=3)
    solver = IPDSolver(game)
    rows = solver.best_response(action_table(BOTS["TFT"](), solver.decisions())).to_json()
    assert len(rows) == 1 + 4 + 16
    by_key = {(r["round"], r["history"]): r["action"] for r in rows}
    # the last round: always defect
    assert all(by_key[(3, history)] == "D" for (r, history) in by_key if r == 3)
    assert set(by_key.values()) <= {"C", "D"}


# -- long matches: the DP over (round, the agent's declared state) ------------------------------------
# (agent move, opponent move) -> (agent, opponent)
_PAYOFF = {(0, 0): (3, 3), (0, 1): (0, 5), (1, 0): (5, 0), (1, 1): (1, 1)}
# P(C | own last, other's last), R,S,T,P = 3,0,5,1
_ZD_EXTORT2 = {(0, 0): 8 / 9, (0, 1): 1 / 2, (1, 0): 1 / 3, (1, 1): 0.0}

# each agent as a machine written here: (start state, P(cooperate | round, state), next state after (own,
# other))
_MACHINES = {
    "AlwaysCooperate": (None, lambda t, s: 1.0, lambda s, a, o: None),
    "AlwaysDefect": (None, lambda t, s: 0.0, lambda s, a, o: None),
    "TFT": (None, lambda t, s: 1.0 if s in (None, 0) else 0.0, lambda s, a, o: o),
    "GenerousTFT": (None, lambda t, s: 1.0 if s in (None, 0) else 0.25, lambda s, a, o: o),
    "GrimTrigger": (False, lambda t, s: 0.0 if s else 1.0, lambda s, a, o: s or o == 1),
    "Mixed": (None, lambda t, s: 0.5, lambda s, a, o: None),
    "AlternatingDefect": (None, lambda t, s: float(t % 2 == 1), lambda s, a, o: None),
    "Random": (None, lambda t, s: 0.5, lambda s, a, o: None),
    "axelrod:ZDExtort2": (None, lambda t, s: 1.0 if s is None else _ZD_EXTORT2[s], lambda s, a, o: (a, o)),
}


def _reference(machine, rounds):
    """Backward induction over (round, machine state), written independently of sepo: the gap and
    the best-response payoff per round."""
    start, cooperate, step = machine
    values: dict = {}

    def value(t, s, index):  # index 0: u_O - u_A, 1: u_O
        if t == rounds:
            return 0.0
        if (t, s, index) not in values:
            p = cooperate(t, s)
            values[(t, s, index)] = max(
                sum(q * ((_PAYOFF[a, o][1] - _PAYOFF[a, o][0]) if index == 0 else _PAYOFF[a, o][1])
                    + q * value(t + 1, step(s, a, o), index) for a, q in ((0, p), (1, 1 - p)) if q > 0)
                for o in (0, 1))
        return values[(t, s, index)]

    return value(0, start, 0) / rounds, value(0, start, 1) / rounds


@pytest.mark.parametrize("rounds", [12, 50])
@pytest.mark.parametrize("name", list(_MACHINES))
def test_long_matches_are_solved_exactly_on_the_agents_state(name, rounds):
    if name.startswith("axelrod:"):
        pytest.importorskip("axelrod")
        from sepo.games.ipd.axelrod_bots import AxelrodPlayer

        agent = AxelrodPlayer(name.split(":", 1)[1])
    else:
        agent = BOTS[name]()
    found = IPDSolver(load_game("ipd", rounds=rounds)).audit(agent)
    gap, br = _reference(_MACHINES[name], rounds)
    assert found.result.exact and "declared state" in found.result.method
    assert found.result.value == pytest.approx(gap, abs=1e-12) and found.result.br_payoff == pytest.approx(
        br, abs=1e-12
    )
    assert found.result.extra["states"] <= 1 + 4 * (rounds - 1)  # a few nodes a round, not 4^t


def test_the_state_best_response_plays_and_earns_the_gap():
    game = load_game("ipd", rounds=12)
    for name in ("GrimTrigger", "AlternatingDefect", "TFT"):
        found = IPDSolver(game).audit(BOTS[name]())
        episode = play_episodes(game, BOTS[name](), [found.response], [0], agent_seed=0)[0]
        gap = (episode.opponent_payoffs.sum() - episode.agent_payoffs.sum()) / game.rounds
        assert gap == pytest.approx(found.result.value, abs=1e-12)


class _Undeclared(Policy):
    """Plays like TFT but declares nothing about its memory (as a language model does)."""

    name = "undeclared"

    def action_probabilities(self, decision):
        return BOTS["TFT"]().action_probabilities(decision)


def test_a_tree_that_would_not_fit_is_refused_in_one_line(monkeypatch):
    with pytest.raises(SepoError, match="--memory M.*--threshold P") as refused:
        IPDSolver(load_game("ipd", rounds=30)).audit(_Undeclared())
    assert "\n" not in str(refused.value)
    import sepo.metrics.repeated as repeated

    # 10 MiB: 8 rounds (21,845 states) no longer fit
    monkeypatch.setattr(repeated, "memory_budget", lambda: 10 * 2**20)
    with pytest.raises(SepoError, match="joint-history tree at 8 rounds has 21,845 states"):
        IPDSolver(load_game("ipd")).audit(_Undeclared())
    # a small state still solves
    assert IPDSolver(load_game("ipd", rounds=8)).audit(BOTS["GrimTrigger"]()).result.exact


def test_exact_only_when_the_agent_reads_at_most_the_memory():
    short = IPDSolver(load_game("ipd", memory=1))
    projected = short.audit(BOTS["AlternatingDefect"](), projection=True).result
    assert (
        projected.value == pytest.approx(4.375)
        and not projected.exact
        and projected.extra["projection_memory"] == 1
    )
    assert (
        IPDSolver(load_game("ipd", memory=2)).audit(BOTS["AlternatingDefect"](), projection=True).result.exact
        is False
    )
    truth = short.audit(BOTS["AlternatingDefect"]()).result  # no projection asked: its own state, exact
    assert truth.value == pytest.approx(2.5) and truth.exact
    assert short.audit(BOTS["TFT"](), projection=True).result.exact  # TFT reads one round
    unknown = short.audit(_Undeclared(), projection=True).result
    assert not unknown.exact and unknown.extra["projection_memory"] == 1
    whole = short.audit(_Undeclared()).result  # no projection asked: the whole history it reads
    assert whole.exact and whole.value == pytest.approx(0.625) and "joint-history tree" in whole.method


def _python_calls(work) -> int:
    """Python function calls (generator steps included) made by `work()`: a count, not a time."""
    import sys

    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count[0]


@pytest.mark.parametrize("spec", ["uniform", "bot:TFT", "bot:GrimTrigger"])
def test_a_declared_agents_long_match_costs_the_same_work_each_round(spec):
    """Audit and play do the same work each round, so `sepo exploit --game ipd --agent uniform
    --rounds 10000` finishes: no round rebuilds the whole history (and its key and scores) to read
    the agent, nor does Grim Trigger's state re-read it. Twice the rounds, about twice the calls."""
    from sepo.metrics.exact import audit_agent, exact_solver
    from sepo.policies.specs import load_agent

    def audit_and_play(rounds):
        game = load_game("ipd", rounds=rounds)
        agent = load_agent(spec, game)
        return lambda: (audit_agent(game, agent, exact_solver(game)),
                        play_episodes(game, agent, [BOTS["TFT"]()], [1], agent_seed=0))

    short, long = _python_calls(audit_and_play(300)), _python_calls(audit_and_play(600))
    assert long < 2.3 * short, (short, long)


def test_a_pruned_audit_of_answer_lines_read_within_a_share_is_not_labelled_exact():
    """A policy read from its answer lines with a share of the replies left over is exact in that
    nothing was sampled (no interval), but not exact as a claim: the pruned audit's record says
    so, and keeps the share."""
    from sepo.metrics.exact import exact_label, exact_solver
    from sepo.policies.text_policy import PolicyEstimate

    class AnswerLines(Policy):
        name = "answer-lines"

        def estimate(self, decisions):
            rows = [np.full((1, len(d.legal_actions)), 1 / len(d.legal_actions)) for d in decisions]
            return PolicyEstimate(list(decisions), rows, [np.ones(1) for _ in decisions], True, 0,
                                  [0] * len(decisions), [1] * len(decisions), rest=0.02)

        def action_probabilities(self, decision):
            raise AssertionError("the audit reads the estimate")

    game = load_game("ipd", rounds=3)
    audit = exact_solver(game).audit(AnswerLines(), threshold=0.01)
    assert audit.interval is None
    assert audit.policy["read_exactly"] is False and audit.policy["rest"] == 0.02
    assert audit.policy["read"].startswith("answer lines read exactly")
    assert exact_label(audit.result, audit.policy) == "estimated"
