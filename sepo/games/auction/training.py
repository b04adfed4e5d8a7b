"""The two-bidder auction as a training environment for the exact tabular SEPO trainer.

A group shares its start state: the opponent, the agent's seat and every value drawn in the
episode (both bidders, all rounds); its rollouts differ in the agent's bids, the opponent's own
randomness and the tie coins. The opponent is drawn uniformly from the train pool plus one more
entry, the exact gap maximiser of the current policy (the rigorous exploiter). Why: the
exploitability attribution can only train states that rollouts visit, and the best response
steers into histories the train bots never produce (after a high bid, say), whose policy would
otherwise stay where it started. As in the paper's per-pool credit, exploiter rollouts carry no
utility and no events; train rollouts' utility and events are scaled by (n + 1) / n so the
expected update is still that of s·u − λe·s·e − λc·c − λx·x with u, c and x against the train
pool (the maximiser's rollouts carry only the exploitability charge). Rollouts follow the game's
rules; collusion and externality are `events.events` under the game's protocol, the one
definition evaluation uses, as rates per round of the rollout's episode. The training reach
ρ(I) is the mixture's: forward passes over the public bid tree with each bot's bids fixed
(`exact.FixedOpponent`) and with the maximiser's (`AuctionSolver.maximiser_reach`).
"""
from __future__ import annotations

import numpy as np

from sepo.games.auction.events import events
from sepo.games.auction.exact import AuctionSolver, FixedOpponent
from sepo.games.base import CHANCE
from sepo.games.records import DecisionRecord, EpisodeRecord, Rollouts


class AuctionTrainingEnvironment:
    def __init__(self, game, train_specs, collusive_specs):
        self.game = game
        self.solver = AuctionSolver(game)
        decisions = self.solver.decisions()
        self.keys = tuple(d.info_key for d in decisions)
        self.row = {key: i for i, key in enumerate(self.keys)}
        self.legal = np.ones((len(self.keys), self.solver.k), dtype=bool)
        self.scale = game.payoff_scale
        self.specs = list(train_specs)
        self.fixed = [FixedOpponent(self.solver, spec.build(game)) for spec in self.specs]
        collusive = {spec.label for spec in collusive_specs}
        self.is_collusive = np.array([spec.label in collusive for spec in self.specs])
        n = len(self.specs)
        self.weight = np.append(np.full(n, (n + 1) / n), 0.0)  # a rollout's credit: train bots, then the maximiser

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        """ρ(I): the probability that a rollout (opponent uniform over the train bots and the
        gap maximiser) meets I."""
        reaches = [fixed.reach(table) for fixed in self.fixed] + [self.solver.maximiser_reach(table)]
        return np.mean(reaches, axis=0)

    def rollout_opponents(self, table: np.ndarray) -> list:
        """The opponents a rollout is drawn from, uniformly: the train bots, then the gap maximiser."""
        return [*(spec.build(self.game) for spec in self.specs), self.solver.best_response(table)]

    def episode_events(self, episode, opponent: int) -> tuple[float, float]:
        """(collusion, externality) of a rollout against rollout opponent `opponent`: the rates of
        `events` under the game's protocol, scaled by the opponent's credit; collusion counts
        against a train bot that is also a collusive partner only."""
        found = events(self.game.protocol, episode)
        credit = self.weight[opponent]
        collusive = opponent < len(self.specs) and self.is_collusive[opponent]
        collusion = found["collusion_events"] / found["collusion_denominator"] if collusive and found["collusion_denominator"] else 0.0
        externality = found["externality_events"] / found["externality_denominator"] if found["externality_denominator"] else 0.0
        return credit * collusion, credit * externality

    def exact_metrics(self, table: np.ndarray) -> dict:
        utility = float(np.mean([fixed.agent_payoff(table) for fixed in self.fixed]))
        gap = self.solver.gap(table)
        return {"utility": utility, self.solver.value_name: gap}

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        rules = self.game.rules
        rounds = rules.rounds
        group_opponent = rng.integers(len(self.weight), size=groups)  # the last index: the gap maximiser
        maximiser = self.solver.best_response(table)
        group_seat = rng.integers(2, size=groups)
        group_values = rng.choice(len(rules.values), p=rules.value_probs, size=(groups, rounds, 2))
        group_of = np.repeat(np.arange(groups), group_size)
        n = len(group_of)
        states = np.zeros((n, rounds), dtype=int)
        actions = np.zeros((n, rounds), dtype=int)
        utility, collusion, externality = np.zeros(n), np.zeros(n), np.zeros(n)
        cumulative = np.cumsum(table, axis=1)
        for r in range(n):
            g = group_of[r]
            seat, index = int(group_seat[g]), int(group_opponent[g])
            opponent = self.specs[index].build(self.game) if index < len(self.specs) else maximiser  # a fresh bot each
            state = self.game.new_initial_state()
            records = []
            for t in range(rounds):
                for player in range(2):
                    state.apply_action(int(group_values[g, t, player if seat == 0 else 1 - player]))
                decision = state.decision(seat)
                row = self.row[decision.info_key]
                bid = int(min(np.searchsorted(cumulative[row], rng.random() * cumulative[row, -1], side="right"), self.solver.k - 1))
                other = opponent.act([state.decision(1 - seat)], rng)[0].action
                states[r, t], actions[r, t] = row, bid
                records.append(DecisionRecord(t, decision.info_key, bid, decision.name_of(bid), decision.observation))
                state.apply_actions((bid, other) if seat == 0 else (other, bid))
                if state.current_player() == CHANCE and len(state.rounds()) == t:
                    outcomes = state.chance_outcomes()
                    state.apply_action(outcomes[int(rng.integers(len(outcomes)))][0])
            episode = EpisodeRecord(opponent.name, "train", 0, seat, state.rounds(), records)
            utility[r] = self.weight[index] * episode.agent_payoffs.mean()
            collusion[r], externality[r] = self.episode_events(episode, index)
        return Rollouts(states, actions, np.ones_like(states, dtype=bool), group_of, utility, collusion, externality)
