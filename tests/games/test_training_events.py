"""Training and evaluation count collusion and externality with the domain's one `events(protocol,
episode)`, under both protocols, in every domain.

- Tabular environments: on episodes played by evaluation's own player, the environment's per-round
  events (what its rollouts average) give the rates `events` gives.
- Language-model environments: at every decision of a small game, the payoff and events a
  completion is charged equal the expected payoff and the expected events that `events` adds from
  that round to the end of the match (over the opponent's replies, chance, and the agent's table
  afterwards), scaled by the opponent's credit: the events to go, as the tabular trainer's
  whole-match rollouts count them. Until a fix only the round's own events were charged, so an
  opponent's reaction in later rounds (TFT after a DEFECT) was the tabular trainer's objective but
  not the language-model trainer's.

Before: the auction and split bargaining trained on the rigorous events under `--protocol paper`
(an always-LOW table against CollusiveLowBid: collusion 0 and externality 0 in training, 1.0 and
about 0.44 in evaluation), and the auction's language-model collusion used the benchmark floor."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import get_domain
from sepo.games.credit import Charges
from sepo.opponents.pools import parse_bot
from sepo.policies.tabular import TabularPolicy
from tests.training.exact_updates import expand, to_go

PROTOCOLS = ("rigorous", "paper")


def _ipd(env, episode):
    payoff = np.array([r.payoffs for r in episode.rounds])
    return env.events(np.array([d.action for d in episode.decisions]), payoff)


def _negotiation(env, episode):
    demands = np.array([r.info["demands"] for r in episode.rounds]) - env.game.min_demand
    return env.events(demands[:, 0], demands[:, 1])


def _negotiation_gt(env, episode):
    rounds = episode.rounds
    return env.events(
        [r.info["demands"][0] for r in rounds],
        [r.info["demands"][1] for r in rounds],
        rounds[0].info["pool"],
        [r.info["deal"] for r in rounds],
        [r.payoffs[0] for r in rounds],
        [r.payoffs[1] for r in rounds],
    )


def _kuhn(env, episode):
    folds = np.zeros(len(episode.rounds))
    for d in episode.decisions:
        folds[d.round] += d.observation["facing_bet"] and d.action == 0
    return env.events(folds, episode.agent_payoffs)  # per hand: a rollout is one hand


TABULAR = {
    # game: (parameters, how the environment's per-round events read an evaluation episode)
    "ipd": ({"rounds": 4, "memory": 1}, _ipd),
    "negotiation": ({"rounds": 3}, _negotiation),
    "negotiation-gt": ({"rounds": 3, "memory": 0, "items": "2,1,1", "values": "4,3,3"}, _negotiation_gt),
    "kuhn": ({"hands": 2}, _kuhn),
}



@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("game_name", sorted(TABULAR) + ["auction"])
def test_tabular_environment_counts_events_as_evaluation_does(game_name, protocol):
    domain = get_domain(game_name)
    params = {"rounds": 3, "memory": 1} if game_name == "auction" else TABULAR[game_name][0]
    game = domain.game(protocol, **params)
    collusive = domain.pools(protocol, game)["collusive"]
    specs = [parse_bot(game_name, entry) for entry in collusive]
    env = domain.training(game, specs, specs, (), Charges(collusion=True, externality=True))
    table = np.where(env.legal, np.random.default_rng(1).random(env.legal.shape), 0.0)
    agent = TabularPolicy(table / table.sum(1, keepdims=True), env.keys)
    seats = (0, 1) if game_name == "auction" else (0,)
    episodes = [
        e
        for seat in seats
        for e in play_episodes(
            game, agent, [specs[0].build(game)] * 12, list(range(12)), agent_seed=seat, agent_player=seat
        )
    ]
    for episode in episodes:
        counted = domain.events(protocol, episode)
        expected = np.array([counted["collusion_events"], counted["externality_events"]], dtype=float)
        if game_name == "auction":  # rates per round of the episode, the collusive bot's credit taken out
            credit = np.array([env.mixture.collusion[0], env.mixture.externality[0]])
            found = np.array(env.episode_events(episode, 0)) / credit * counted["externality_denominator"]
        else:  # per round (per hand in Kuhn), summed over the episode
            found = np.array([np.sum(events) for events in TABULAR[game_name][1](env, episode)])
        assert found == pytest.approx(expected, abs=1e-12), (episode.rounds, protocol)


LLM = {
    "ipd": {"rounds": 2, "memory": 1},
    "auction": {"rounds": 2, "memory": 1},
    "negotiation": {"rounds": 2},
    "negotiation-gt": {"rounds": 2, "items": "1,1,1", "values": "4,3,3", "opponent_values": "2,4,4"},
}


def _row(game_name, env):
    if game_name == "negotiation-gt":  # a fixed deal: one row per round
        return lambda decision: env.solver.row(0, decision.observation["round"] - 1)
    rows = {d.info_key: i for i, d in enumerate(env.solver.decisions())}
    return lambda decision: rows[decision.info_key]


def _context(game_name, env, node):
    row = _row(game_name, env)(node.state.decision(node.seat))
    if game_name == "auction":
        from sepo.games.auction.llm_env import DecisionContext

        return DecisionContext(row, node.seat, node.opponent, node.state.clone())
    if game_name == "negotiation-gt":
        from sepo.games.negotiation_gt.llm_env import DecisionContext

        return DecisionContext(row, node.opponent, node.state.clone(), 0)
    from sepo.games.records import MatchContext

    return MatchContext(row, node.history, node.opponent)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("game_name", sorted(LLM))
def test_language_model_environment_charges_the_events_evaluation_counts(game_name, protocol):
    domain = get_domain(game_name)
    game = domain.game(protocol, **LLM[game_name])
    collusive = domain.pools(protocol, game)["collusive"]
    specs = [parse_bot(game_name, entry) for entry in collusive]
    env = domain.llm_training(game, specs, specs, (), Charges(collusion=True, externality=True))
    width = max(len(d.legal_actions) for d in env.solver.decisions())
    table = np.random.default_rng(2).dirichlet(np.ones(width), size=len(env.solver.decisions()))
    table *= np.array([[c < len(d.legal_actions) for c in range(width)] for d in env.solver.decisions()])
    table /= table.sum(1, keepdims=True)
    tabular = getattr(env, "tabular", None)
    opponents = tabular.rollout_opponents(table) if tabular is not None else env.rollout_bots(table)
    # each term scaled by the opponent's credit for it
    mixture = (tabular if tabular is not None else env).mixture
    credit = np.stack([mixture.utility, mixture.collusion, mixture.externality], axis=1)
    seats = (0, 1) if game_name == "auction" else (0,)
    checked = []

    def check(node):
        if node.opponent >= len(specs):  # the gap maximiser: no events (module doc of the environments)
            return
        context = _context(game_name, env, node)
        decision = env.training_decision(context, np.random.default_rng(0))
        for action in decision.legal_actions:
            found = np.array(env.outcome(table, context, decision, action)) / credit[node.opponent]
            expected = to_go(
                game, domain.events, node, opponents[node.opponent], table, _row(game_name, env), action
            )
            assert found == pytest.approx(expected, abs=1e-12), (node.history, action)
            checked.append(len(node.history))

    expand(game, table, _row(game_name, env), opponents, seats, visit=check)
    assert set(checked) == set(range(LLM[game_name]["rounds"]))
