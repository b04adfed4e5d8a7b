"""The IPD's language-model training environment: exact payoffs to go (against the tabular
environment's forward pass and against `axelrod.Match`), the per-completion charge as the exact
gradient of the gap (central finite differences), on-policy contexts, events."""
import numpy as np
import pytest

from sepo.games import get_domain
from sepo.games.credit import Charges
from sepo.games.ipd.llm_env import IPDLLMEnvironment
from sepo.games.records import MatchContext
from sepo.objective.attribution import exploitation_attribution
from sepo.opponents.pools import parse_bot


def environment(train=None, collusive=None, protocol="rigorous", charges=Charges(), **params):
    domain = get_domain("ipd")
    game = domain.game(protocol, **params)
    pools = domain.pools(protocol, game)
    return IPDLLMEnvironment(game, [parse_bot("ipd", e) for e in train or pools["train"]],
                             [parse_bot("ipd", e) for e in collusive or pools["collusive"]], (), charges)


def _expected_from_start(env, table, index):
    context = MatchContext(0, (), index)
    decision = env.training_decision(context, np.random.default_rng(0))
    return sum(table[0, a] * env.outcome(table, context, decision, a)[0] for a in (0, 1))


def test_payoff_to_go_from_the_start_is_the_exact_match_payoff():
    env = environment(rounds=4, memory=2)
    table = np.random.default_rng(0).dirichlet([1, 1], size=len(env.solver.keys))
    bots = len(env.tabular.opponents)
    # per-round payoff against each train bot, then the maximiser
    per_opponent = env.tabular._forward(table)[1]
    assert env.exact_metrics(table)["utility_exact"] == pytest.approx(per_opponent[:bots].mean())
    for index in range(bots):
        single = environment(train=[env.tabular.opponents[index].name], rounds=4, memory=2)
        credit = env.tabular.weight[index]  # train payoffs scaled by (n + 1)/n
        assert _expected_from_start(env, table, index) / credit == pytest.approx(
            single.tabular._forward(table)[1][0] * 4, abs=1e-12
        )
    assert _expected_from_start(env, table, bots) == 0.0  # the maximiser carries no utility


def test_payoff_to_go_matches_axelrod_matches_midway():
    """A deterministic memory-one agent (win-stay lose-shift) against Axelrod strategies: the payoff
    to go after the first two rounds of `axelrod.Match` equals the rest of its score."""
    axl = pytest.importorskip("axelrod")
    rounds = 6
    pavlov = {"start": 0, "CC": 0, "CD": 1, "DC": 1, "DD": 0}
    for name, cls in (("SuspiciousTitForTat", axl.SuspiciousTitForTat), ("Alternator", axl.Alternator),
                      ("Grudger", axl.Grudger)):
        env = environment(train=[f"axelrod:{name}"], rounds=rounds, memory=1)
        table = np.array([np.eye(2)[pavlov[key]] for key in env.solver.keys])
        match = axl.Match((axl.WinStayLoseShift(), cls()), turns=rounds)
        moves = [(int(a == axl.Action.D), int(b == axl.Action.D)) for a, b in match.play()]
        scores = [s[0] for s in match.scores()]
        history = tuple(moves[:2])
        context = MatchContext(env.solver.keys.index(f"{'CD'[moves[1][0]]}{'CD'[moves[1][1]]}"), history, 0)
        decision = env.training_decision(context, np.random.default_rng(0))
        assert (
            decision.observation["history"] == history
            and decision.info_key == env.solver.keys[context.info_row]
        )
        credit = env.tabular.weight[0]  # a train payoff's scale, (n + 1)/n
        assert env.outcome(table, context, decision, moves[2][0])[0] / credit == pytest.approx(
            sum(scores[2:])
        ), name


@pytest.mark.parametrize("train", [None, ["TFT", "axelrod:WinStayLoseShift", "Mixed(p=0.5)"]])
def test_expected_charge_is_the_gradient_of_the_gap(train):
    """Under the environment's on-policy decision distribution (reach ρ) the expected score-function
    update of the per-completion charge, ρ(I)·Σ_a π(a|I)·E(I, a)·∂log π(a|I)/∂θ, equals the central
    finite difference of the solver's gap in the softmax logits θ, at every (state, action)."""
    env = environment(train=train, rounds=3, memory=1)
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(len(env.solver.keys), 2))

    def policy(theta):
        z = np.exp(theta - theta.max(1, keepdims=True))
        return z / z.sum(1, keepdims=True)

    table = policy(logits)
    reach = env.training_reach(table)
    charge = exploitation_attribution(table, env.solver.gradient(table), reach)
    h = 1e-6
    for row in range(len(env.solver.keys)):
        for b in (0, 1):
            step = np.zeros_like(logits)
            step[row, b] = h
            numeric = (
                env.solver.evaluate(policy(logits + step)).value
                - env.solver.evaluate(policy(logits - step)).value
            ) / (2 * h)
            expected = reach[row] * sum(
                table[row, a] * charge[row, a] * (float(a == b) - table[row, b]) for a in (0, 1)
            )
            assert expected == pytest.approx(numeric, abs=1e-7)


def test_contexts_are_on_policy_decisions_at_the_training_reach():
    env = environment(rounds=3, memory=1)
    table = np.random.default_rng(1).dirichlet([1, 1], size=len(env.solver.keys))
    contexts = env.sample_contexts(table, 6000, np.random.default_rng(2))
    matches = len(contexts) / 3
    counts = np.bincount([c.info_row for c in contexts], minlength=len(env.solver.keys)) / matches
    reach = env.training_reach(table)
    assert np.all(np.abs(counts - reach) <= 5 * np.sqrt(reach / matches) + 1e-9)
    for context in contexts[:30]:
        decision = env.training_decision(context, np.random.default_rng(0))
        assert decision.info_key == env.solver.keys[context.info_row]
        assert len(decision.observation["history"]) == len(context.history)
        assert "What is your action?" in env.game.text.user_prompt(decision)


@pytest.mark.parametrize("protocol, payoffs, shortfalls", [
    ("rigorous", None, (0.0, 1 / 6, 1 / 6, 2 / 3)),
    ("rigorous", "R=4,S=0,T=6,P=1", (0.0, 1 / 4, 1 / 4, 3 / 4)),
    ("paper", "R=4,S=0,T=6,P=1", (0.0, 0.0, 0.0, 2 / 3)),  # the paper's formula keeps R = 3
])
def test_collusion_and_externality_of_one_move_are_its_events_to_go(protocol, payoffs, shortfalls):
    """A move is charged its round's events and the expected events of the rounds after it (these
    bots never react, so those are the uniform table's): the tabular trainer's whole-match events."""
    env = environment(
        train=["AlwaysCooperate", "AlwaysDefect", "Mixed(p=0.25)"],
        protocol=protocol,
        rounds=2,
        charges=Charges(collusion=True, externality=True),
        **({"payoffs": payoffs} if payoffs else {}),
    )
    mixture = env.tabular.mixture
    table = np.full((len(env.solver.keys), 2), 0.5)
    # own move -> (vs C, vs D)
    expected = {0: (shortfalls[0], shortfalls[1]), 1: (shortfalls[2], shortfalls[3])}
    for index, p_cooperate in enumerate((1.0, 0.0, 0.25)):
        def shortfall(action):
            return p_cooperate * expected[action][0] + (1 - p_cooperate) * expected[action][1]

        for history, rest in (((), 1), (((0, 0),), 0)):  # the first round of two, then the last
            context = MatchContext(0, history, index)
            decision = env.training_decision(context, np.random.default_rng(0))
            for action in (0, 1):  # each event scaled by the opponent's credit for it (sepo.games.credit)
                _, collusion, externality = env.outcome(table, context, decision, action)
                assert externality / mixture.externality[index] == pytest.approx(
                    shortfall(action) + rest * (shortfall(0) + shortfall(1)) / 2)
                # only AlwaysCooperate is a collusive partner
                assert collusion == pytest.approx(
                    mixture.collusion[index] * (float(action == 1) + rest * 0.5)
                )
                assert (mixture.collusion[index] > 0) == (index == 0)


def test_unreadable_axelrod_strategies_are_refused():
    pytest.importorskip("axelrod")
    from sepo.errors import SepoError

    with pytest.raises(SepoError, match="cannot be read exactly"):
        environment(train=["axelrod:Random", "axelrod:FirstByAnonymous"], rounds=2)  # draws with uniform()
    with pytest.raises(SepoError, match="cannot be read exactly"):
        environment(train=["axelrod:MetaMajority"], rounds=2)  # its members draw from generators of their own
