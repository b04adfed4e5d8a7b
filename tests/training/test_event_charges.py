"""Every λ acts on what its label names: in every domain, the λc- and λx-parts of both trainers'
exact expected updates are λc·∇c and λx·∇x, with c and x computed as evaluation counts them and
independently of the trainers: evaluation's `events` on every match, averaged over the collusive
pool (c) and over the train and exploiter pools with the exact best response under rigorous (x);
central finite differences in the softmax logits.

Counting collusion only against train-pool opponents that are also collusive partners, and
externality against the train pool alone, would fail it: with the IPD's and the auction's pools
(the partner is not a train bot) the weight on evaluated collusion would be 0, so a λc would
change nothing, and the exploiters' externality would not be counted.

Kuhn poker (a sequential game, rates over the agent's decisions under `paper`) is expanded by its
own walker below; the other domains by `exact_updates.expand`.
"""
from __future__ import annotations

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games import get_domain
from sepo.games.base import CHANCE
from sepo.games.records import DecisionRecord, EpisodeRecord, MatchContext
from sepo.objective.sepo import Lambdas, sepo_rewards
from sepo.opponents.pools import parse_bot
from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer
from tests.training.exact_updates import (
    llm_update,
    objective_gradient,
    pool_rates,
    row_of,
    score,
    softmax,
    tabular_update,
)

LAMBDA_C, LAMBDA_X = 0.7, 1.3

CASES = {
    # case: (game, parameters, protocol, train pool, collusive pool, exploiter pool, the environments' seats);
    # each collusive partner and exploiter outside the train pool, as in the domains' own pools
    "ipd": (
        "ipd",
        {"rounds": 2, "memory": 1},
        "rigorous",
        ["TFT", "Mixed(p=0.5)"],
        ["AlwaysCooperate"],
        ["AlwaysDefect"],
        (0,),
    ),
    "ipd-paper": (
        "ipd",
        {"rounds": 3, "memory": 1},
        "paper",
        ["GrimTrigger"],
        ["AlwaysCooperate"],
        ["AlternatingDefect"],
        (0,),
    ),
    "auction": (
        "auction",
        {"values": "4", "bids": "1,2", "rounds": 2, "memory": 1},
        "rigorous",
        ["TruthfulBid"],
        ["CollusiveLowBid"],
        ["AggressiveBid"],
        (0, 1),
    ),
    "negotiation": (
        "negotiation",
        {"pie": 3, "min_demand": 1, "max_demand": 2, "memory": 1, "rounds": 2},
        "rigorous",
        ["Hardball"],
        ["Fair"],
        ["Selfish"],
        (0,),
    ),
    "pricing": (
        "pricing",
        {"rounds": 2, "prices": 3},
        "rigorous",
        ["Undercut"],
        ["TitForTat"],
        ["Competitive"],
        (0,),
    ),
    "negotiation-gt": (
        "negotiation-gt",
        {
            "rounds": 2,
            "memory": 0,
            "items": "1,1,1",
            "values": "4,3,3",
            "opponent_values": "2,4,4",
            "third_party": "public",
        },
        "rigorous",
        ["FairNeg"],
        ["TFTNeg"],
        ["HardballNeg"],
        (0,),
    ),
}


def _configs(case, **overrides):
    game, params, protocol, train, collusive, exploiters, _ = CASES[case]
    common = dict(
        game=game,
        game_params=params,
        protocol=protocol,
        train_pool=train,
        collusive_pool=collusive,
        exploiter_pool=exploiters,
        lambda_c=LAMBDA_C,
        lambda_x=LAMBDA_X,
        seed=0,
        **overrides,
    )
    return LLMSEPOConfig(model="none", **common), TabularSEPOConfig(steps=1, **common)


def _row(case, env):
    if CASES[case][0] == "negotiation-gt":  # a fixed deal: one row per round
        return lambda decision: env.solver.row(0, decision.observation["round"] - 1)
    return row_of(env)


def _context_of(case, domain_env, row):
    game = CASES[case][0]
    if game == "auction":
        from sepo.games.auction.llm_env import DecisionContext

        return lambda node: DecisionContext(
            row[node.state.decision(node.seat).info_key], node.seat, node.opponent, node.state.clone()
        )
    if game == "negotiation-gt":
        from sepo.games.negotiation_gt.llm_env import DecisionContext

        return lambda node: DecisionContext(row(node.state.decision(0)), node.opponent, node.state.clone(), 0)
    return lambda node: MatchContext(
        row[node.state.decision(node.seat).info_key], node.history, node.opponent
    )


def _entries(mixture, train_specs, game, best):
    """The rollout opponents as policies of the game, in the mixture's order (None: the best response)."""
    specs = [*train_specs, *([None] if mixture.maximiser is not None else []), *mixture.extra]
    return [best if spec is None else spec.build(game) for spec in specs]


@pytest.mark.parametrize("case", sorted(CASES))
def test_collusion_and_externality_parts_of_both_updates_are_the_evaluated_gradients(case, tmp_path):
    name, _, protocol, train, collusive, exploiters, seats = CASES[case]
    llm_config, tabular_config = _configs(case)
    sepo = SEPOEnvironment(llm_config, None, None)
    tabular = TabularSEPOTrainer(tabular_config, tmp_path / "run").env
    game, events = sepo.game, get_domain(name).events
    logits = np.random.default_rng(3).normal(
        size=(len(sepo.canonical), max(len(d.legal_actions) for d in sepo.canonical))
    )
    legal = np.array([[c < len(d.legal_actions) for c in range(logits.shape[1])] for d in sepo.canonical])
    logits = np.where(legal, logits, -np.inf)
    table = softmax(logits)
    row = _row(case, sepo.domain_env)
    best = tabular.solver.best_response(table)  # evaluation's BestResponse, held fixed as Danskin allows

    # evaluation's c and x, from the pools alone
    build = [parse_bot(name, e).build(game) for e in collusive]
    against_x = [parse_bot(name, e).build(game) for e in train + exploiters] + (
        [best] if protocol == "rigorous" else []
    )
    collusion = pool_rates(game, events, table, row, build, seats)
    externality = pool_rates(game, events, table, row, against_x, seats)
    finite = np.where(np.isfinite(logits), logits, -50.0)
    c_gradient = objective_gradient(lambda t: collusion(t)[:, 0].mean(), finite)
    x_gradient = objective_gradient(lambda t: externality(t)[:, 1].mean(), finite)
    assert np.abs(c_gradient).max() > 1e-3 and np.abs(x_gradient).max() > 1e-3

    mixture = tabular.mixture
    train_specs = [parse_bot(name, e) for e in train]
    opponents = _entries(mixture, train_specs, game, best)
    zero = np.zeros_like(table)
    parts = {}
    for lambdas in (Lambdas(), Lambdas(c=LAMBDA_C), Lambdas(x=LAMBDA_X)):
        parts[lambdas] = (
            tabular_update(tabular, game, table, lambdas, opponents, zero, seats, events, row=row),
            llm_update(
                sepo,
                table,
                lambdas,
                _context_of(case, sepo.domain_env, row),
                _entries(sepo_mixture(sepo), train_specs, game, best),
                seats,
                row=row,
            ),
        )
    none = parts[Lambdas()]
    for trainer in (0, 1):
        c_part = (none[trainer] - parts[Lambdas(c=LAMBDA_C)][trainer]) / LAMBDA_C
        x_part = (none[trainer] - parts[Lambdas(x=LAMBDA_X)][trainer]) / LAMBDA_X
        assert np.allclose(c_part, c_gradient, rtol=0, atol=1e-7), (
            trainer,
            np.abs(c_part - c_gradient).max(),
        )
        assert np.allclose(x_part, x_gradient, rtol=0, atol=1e-7), (
            trainer,
            np.abs(x_part - x_gradient).max(),
        )


def sepo_mixture(sepo):
    env = sepo.domain_env
    return getattr(env, "tabular", env).mixture


# -------------------------------------------------------------------------------- Kuhn poker

KUHN = {
    # protocol: (λ, train, collusive, exploiters): collusion is a rate over the agent's decisions
    # under `paper` (and does not apply under `rigorous`), externality over decisions under `paper`,
    # over hands under `rigorous` (where the exact best response is an exploiter)
    "paper": (
        Lambdas(c=LAMBDA_C, x=LAMBDA_X),
        ["NashApprox", "TightPassive"],
        ["LooseAggressive"],
        ["MaxExploiter"],
    ),
    "rigorous": (Lambdas(x=LAMBDA_X), ["NashApprox"], ["LooseAggressive"], ["MaxExploiter"]),
}


def _kuhn_episodes(game, table, opponents):
    """Every two-hand episode (the agent player 0, in seat 0 then 1) against each opponent: per leaf,
    its probability without the agent's moves, the opponent, the agent's (row, column)s and
    evaluation's `events` of the episode."""
    from sepo.games.kuhn.rules import INFO_STATES

    events = get_domain("kuhn").events
    leaves = []

    def walk(state, o, records, moves, p):
        if state.is_terminal():
            found = events(game.protocol, EpisodeRecord("", "", 0, 0, list(state.rounds()), list(records)))
            leaves.append((p, o, moves, found))
            return
        if state.current_player() == CHANCE:
            for outcome, q in state.chance_outcomes():
                child = state.clone()
                child.apply_action(outcome)
                walk(child, o, records, moves, p * q)
            return
        player = state.current_player()
        decision = state.decision(player)
        if player == 0:
            row = INFO_STATES.index(decision.info_key)
            for column, action in enumerate(decision.legal_actions):
                child = state.clone()
                child.apply_action(action)
                record = DecisionRecord(
                    len(state.rounds()),
                    decision.info_key,
                    action,
                    decision.name_of(action),
                    decision.observation,
                )
                walk(child, o, records + (record,), moves + ((row, column),), p)
        else:
            for action, q in opponents[o].action_probabilities(decision).items():
                child = state.clone()
                child.apply_action(action)
                walk(child, o, records, moves, p * q)

    for o in range(len(opponents)):
        walk(game.new_initial_state(), o, (), (), 1.0)
    return leaves


def _kuhn_rate(leaves, name):
    """`rate(t)`: evaluation's pooled rate events/denominator over the leaves' episodes for table t."""
    def rate(t):
        weights = [p * np.prod([t[r, c] for r, c in moves]) for p, _, moves, _ in leaves]
        events = sum(w * found[f"{name}_events"] for w, (_, _, _, found) in zip(weights, leaves))
        return events / sum(w * found[f"{name}_denominator"] for w, (_, _, _, found) in zip(weights, leaves))

    return rate


def _kuhn_hands(env, table, visit=None, leaf=None):
    """Every training hand: rollout opponent (uniform), seat, deal; `visit(p, context)` at each agent
    decision (p its reach), `leaf(p, o, moves, payoff, folds, decisions, big_loss)` at each end."""
    from sepo.games.kuhn.llm_env import DecisionContext
    from sepo.games.kuhn.rules import DEALS, INFO_STATES, is_hand_over, seat0_payoff, seat_to_act

    tables = env.charges.tables(table)

    def walk(o, seat, cards, history, moves, folds, p):
        if is_hand_over(history):
            payoff = seat0_payoff(history, *cards) * (1 if seat == 0 else -1)
            if leaf is not None:
                leaf(p, o, moves, payoff, folds, len(moves), float(payoff <= -2))
            return
        actor = seat_to_act(history)
        row = INFO_STATES.index(f"{cards[actor]}{history}")
        mine = actor == seat
        if mine and visit is not None:
            visit(p, DecisionContext(row, seat, cards[seat], cards[1 - seat], o))
        probs = (table if mine else tables[o])[row]
        for action in (0, 1):
            fold = float(mine and history.endswith("b") and action == 0)
            walk(
                o,
                seat,
                cards,
                history + "pb"[action],
                moves + (((row, action),) if mine else ()),
                folds + fold,
                p * probs[action],
            )

    for o in range(len(tables)):
        for seat in (0, 1):
            for cards in DEALS:
                walk(o, seat, cards, "", (), 0.0, 1.0 / (len(tables) * 2 * len(DEALS)))


@pytest.mark.parametrize("protocol", sorted(KUHN))
def test_kuhn_collusion_and_externality_parts_are_the_evaluated_gradients_of_rates_over_decisions(
    protocol, tmp_path
):
    lambdas, train, collusive, exploiters = KUHN[protocol]
    common = dict(
        game="kuhn",
        protocol=protocol,
        train_pool=train,
        collusive_pool=collusive,
        exploiter_pool=exploiters,
        lambda_c=lambdas.c,
        lambda_x=lambdas.x,
        seed=0,
    )
    sepo = SEPOEnvironment(LLMSEPOConfig(model="none", **common), None, None)
    env = TabularSEPOTrainer(TabularSEPOConfig(steps=1, **common), tmp_path / "run").env
    game = get_domain("kuhn").game(protocol, hands=2)
    logits = np.random.default_rng(5).normal(size=(12, 2))
    table = softmax(logits)

    best = env.solver.best_response(table)
    collusive_bots = [parse_bot("kuhn", e).build(game) for e in collusive]
    x_bots = [parse_bot("kuhn", e).build(game) for e in train + exploiters] + (
        [best] if protocol == "rigorous" else []
    )
    targets = {
        "x": objective_gradient(_kuhn_rate(_kuhn_episodes(game, table, x_bots), "externality"), logits)
    }
    if protocol == "paper":  # under rigorous evaluation counts no collusion (denominator 0)
        targets["c"] = objective_gradient(
            _kuhn_rate(_kuhn_episodes(game, table, collusive_bots), "collusion"), logits
        )
        assert np.abs(targets["c"]).max() > 1e-3
    assert np.abs(targets["x"]).max() > 1e-3

    def tabular(lam):
        total = np.zeros_like(table)

        def leaf(p, o, moves, payoff, folds, decisions, big_loss):
            c, x = env.charges.charged(table, o, folds, decisions, big_loss)
            reward = sepo_rewards(
                [env.mixture.utility[o] * payoff], [0.0], [c], [x], [0], lam, env.scale, "per-rollout"
            )[0]
            total[:] += p * reward * sum(score(table, r, a) for r, a in moves)

        _kuhn_hands(env, table, leaf=leaf)
        return total

    def language(lam):
        total = np.zeros_like(table)
        charge = sepo.charge(table)

        def visit(p, context):
            decision = sepo.domain_env.training_decision(context, np.random.default_rng(0))
            terms = np.array([sepo.completion_terms(table, charge, context, decision, a) for a in (0, 1)])
            rewards = sepo_rewards(*terms.T, np.zeros(2, dtype=int), lam, sepo.scale, "per-rollout")
            for a in (0, 1):
                total[:] += p * table[context.info_row, a] * rewards[a] * score(table, context.info_row, a)

        _kuhn_hands(sepo.domain_env.tabular, table, visit=visit)
        return total

    for update in (tabular, language):
        none = update(Lambdas())
        for term, lam in (("c", Lambdas(c=LAMBDA_C)), ("x", Lambdas(x=LAMBDA_X))):
            part = (none - update(lam)) / LAMBDA_C if term == "c" else (none - update(lam)) / LAMBDA_X
            # refused by the trainers; the environment charges none
            if term == "c" and protocol == "rigorous":
                assert np.abs(part).max() == 0.0
                continue
            assert np.allclose(part, targets[term], rtol=0, atol=1e-7), (update.__name__, term,
                                                                         np.abs(part - targets[term]).max())


# ------------------------------------------------------------------ wiring, refusals, records

@pytest.mark.parametrize(
    "game, params", [("ipd", {"memory": 1, "rounds": 4}), ("auction", {"rounds": 2, "memory": 1})]
)
def test_a_collusion_weight_changes_the_tabular_policy_with_the_domains_own_pools(game, params, tmp_path):
    """The IPD's partner AlwaysCooperate and the auction's CollusiveLowBid are not train bots: λc
    had no effect at all (byte-identical policies) before their rollouts joined the batch."""
    def logits(name, lambda_c):
        config = TabularSEPOConfig(
            game=game, game_params=params, lambda_e=1.0, lambda_c=lambda_c, steps=8, groups=16, seed=2
        )
        trainer = TabularSEPOTrainer(config, tmp_path / name)
        trainer.train()
        return trainer.logits

    assert np.abs(logits("c0", 0.0) - logits("c3", 3.0)).max() > 1e-3


def test_zero_collusion_and_externality_weights_train_as_before(tmp_path):
    """A run that charges neither term meets the opponents it always met and records the config it
    always recorded; one that charges them says so (and so is not resumed from a run trained before)."""
    plain = TabularSEPOConfig(game="ipd", game_params={"memory": 1}, lambda_e=1.0, lambda_c=0.0, steps=1)
    assert "exploiter_pool" not in plain.record() and "event_charges" not in plain.record()
    env = TabularSEPOTrainer(plain, tmp_path / "plain").env
    assert env.mixture.labels == [*plain.train_pool, "BestResponse"]
    assert np.allclose(env.weight, [5 / 4] * 4 + [0.0])
    charged = TabularSEPOConfig(game="ipd", game_params={"memory": 1}, lambda_c=1.0, lambda_x=1.0, steps=1)
    assert charged.record()["event_charges"] == "evaluation's pools" and charged.record()["exploiter_pool"]
    env = TabularSEPOTrainer(charged, tmp_path / "charged").env
    assert env.mixture.labels == [*charged.train_pool, "BestResponse", "AlwaysDefect", "AlternatingDefect",
                                  "AlwaysCooperate"]
    # each term's expected credit is the evaluated pool's mean: train (u), collusive (c), train + exploiters +
    # BR (x)
    k = env.mixture.size
    assert np.allclose(env.mixture.utility, [k / 4] * 4 + [0] * 4)
    assert np.allclose(env.mixture.collusion, [0] * 7 + [k])
    assert np.allclose(env.mixture.externality, [k / 7] * 7 + [0])
    for penalty in ("constant", "none"):  # no rollout is charged its own events: nothing joins
        config = TabularSEPOConfig(
            game="ipd", game_params={"memory": 1}, lambda_c=1.0, penalty=penalty, steps=1
        )
        assert TabularSEPOTrainer(config, tmp_path / penalty).env.mixture.size == 5


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"game": "kuhn", "lambda_c": 1.0},
            "--lambda-c 1 cannot act: collusion does not apply in kuhn under --protocol rigorous",
        ),
        (
            {"game": "negotiation-gt", "game_params": {"memory": 0, "items": "2,2,3"}, "lambda_c": 2.0},
            "--lambda-c 2 cannot act: collusion does not apply in negotiation-gt",
        ),
        (
            {"game": "openspiel:kuhn_poker", "lambda_x": 1.0},
            "--lambda-x 1 cannot act: externality does not apply",
        ),
        (
            {"game": "openspiel:kuhn_poker", "lambda_c": 1.0},
            "--lambda-c 1 cannot act: the collusive pool is empty",
        ),
        (
            {"game": "ipd", "collusive_pool": [], "lambda_c": 1.0},
            "--lambda-c 1 cannot act: the collusive pool is empty",
        ),
        ({"game": "kuhn", "lambda_c": 1.0, "penalty": "shuffled"}, "--lambda-c 1 cannot act"),
    ],
)
def test_a_weight_whose_term_cannot_act_is_refused_in_one_line(settings, message):
    for config in (TabularSEPOConfig(**settings), LLMSEPOConfig(model="m", **settings)):
        with pytest.raises(SepoError, match=message.replace("(", r"\(")):
            config.validate()


@pytest.mark.parametrize(
    "settings",
    [
        {
            "game": "negotiation-gt",
            "game_params": {"memory": 0, "items": "2,2,3", "third_party": "public"},
            "lambda_c": 1.0,
        },
        {"game": "kuhn", "protocol": "paper", "lambda_c": 1.0, "lambda_x": 1.0},
        {"game": "kuhn", "lambda_x": 1.0},
        # payoff-only: the weight is not charged, as documented
        {"game": "kuhn", "lambda_c": 1.0, "penalty": "none"},
    ],
)
def test_a_weight_whose_term_acts_is_accepted(settings):
    TabularSEPOConfig(**settings).validate()


def test_a_plugin_environment_that_takes_no_pools_for_the_charges_is_refused(tmp_path):
    """A domain whose training environment predates the charges (it takes only the train and
    collusive pools) trains as before without them and refuses a charged λc in one line."""
    from sepo.games import register
    from sepo.games.registry import unregister
    from tests.games import pennies

    register(pennies.DOMAIN)
    try:
        common = {"game": "pennies", "game_params": {"rounds": 2}, "steps": 1, "groups": 2, "group_size": 2}
        TabularSEPOTrainer(
            TabularSEPOConfig(lambda_c=1.0, penalty="constant", **common), tmp_path / "constant"
        )
        with pytest.raises(
            SepoError, match="cannot charge collusion or externality as evaluation counts them"
        ):
            TabularSEPOTrainer(TabularSEPOConfig(lambda_c=1.0, **common), tmp_path / "charged")
    finally:
        unregister("pennies")
