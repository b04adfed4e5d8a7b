"""The two-bidder auction as a training environment for the exact tabular SEPO trainer.

A group shares its start state: the opponent, the agent's seat and every value drawn in the
episode (both bidders, all rounds); its rollouts differ in the agent's bids, the opponent's own
randomness and the tie coins. The opponent is drawn uniformly from the train pool plus one more
entry, the exact gap maximiser of the current policy (the rigorous exploiter). Why: the
exploitability attribution can only train states that rollouts visit, and the best response
steers into histories the train bots never produce (after a high bid, say), whose policy would
otherwise stay where it started. When λc or λx is charged, the collusive partners and exploiters
that evaluation counts them against join the draw (`sepo.games.credit`). As in the paper's
per-pool credit, each rollout's utility, collusion and externality are scaled by its opponent's
credit for that term, so the expected update is that of s·u − λe·s·e − λc·c − λx·x with u against
the train pool, c against the collusive pool and x against the train and exploiter pools (the
maximiser among them under rigorous), as evaluation counts them. Rollouts follow the game's rules;
collusion and externality are `events.events` under the game's protocol, the one definition
evaluation uses, as rates per round of the rollout's episode. The training reach ρ(I) is the
mixture's: forward passes over the public bid tree with each bot's bids fixed
(`exact.FixedOpponent`) and with the maximiser's (`AuctionSolver.maximiser_reach`).
"""
from __future__ import annotations

import numpy as np

from sepo.games.auction.events import events
from sepo.games.auction.exact import AuctionSolver, FixedOpponent
from sepo.games.base import CHANCE
from sepo.games.credit import Charges, training_mixture
from sepo.games.records import DecisionRecord, EpisodeRecord, Rollouts


class AuctionTrainingEnvironment:
    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.solver = AuctionSolver(game)
        decisions = self.solver.decisions()
        self.keys = tuple(d.info_key for d in decisions)
        self.row = {key: i for i, key in enumerate(self.keys)}
        self.legal = np.ones((len(self.keys), self.solver.k), dtype=bool)
        self.scale = game.payoff_scale
        self.specs = list(train_specs)
        self.mixture = training_mixture(train_specs, collusive_specs, exploiter_specs, charges=charges,
                                        best_response_counts=game.protocol == "rigorous")
        self.entries = [*self.specs, None, *self.mixture.extra]  # None: the gap maximiser
        self.fixed = [FixedOpponent(self.solver, spec.build(game)) for spec in self.specs]
        self.fixed_extra = [FixedOpponent(self.solver, spec.build(game)) for spec in self.mixture.extra]
        # a rollout's utility credit: train bots, the maximiser, then the others
        self.weight = self.mixture.utility

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        """ρ(I): the probability that a rollout (opponent uniform over the train bots, the gap
        maximiser and the opponents of charged terms) meets I."""
        reaches = ([fixed.reach(table) for fixed in self.fixed] + [self.solver.maximiser_reach(table)]
                   + [fixed.reach(table) for fixed in self.fixed_extra])
        return np.mean(reaches, axis=0)

    def rollout_opponents(self, table: np.ndarray) -> list:
        """The opponents a rollout is drawn from, uniformly: the train bots, the gap maximiser, then
        the opponents of charged terms."""
        maximiser = self.solver.best_response(table)
        return [maximiser if spec is None else spec.build(self.game) for spec in self.entries]

    def episode_events(self, episode, opponent: int) -> tuple[float, float]:
        """(collusion, externality) of a rollout against rollout opponent `opponent`: the rates of
        `events` under the game's protocol, scaled by the opponent's credits for them."""
        found = events(self.game.protocol, episode)
        collusion = (
            found["collusion_events"] / found["collusion_denominator"]
            if found["collusion_denominator"]
            else 0.0
        )
        externality = (
            found["externality_events"] / found["externality_denominator"]
            if found["externality_denominator"]
            else 0.0
        )
        return self.mixture.collusion[opponent] * collusion, self.mixture.externality[opponent] * externality

    def exact_metrics(self, table: np.ndarray) -> dict:
        utility = float(np.mean([fixed.agent_payoff(table) for fixed in self.fixed]))
        gap = self.solver.gap(table)
        return {"utility": utility, self.solver.value_name: gap}

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        rules = self.game.rules
        rounds = rules.rounds
        group_opponent = rng.integers(self.mixture.size, size=groups)  # index n: the gap maximiser
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
            spec = self.entries[index]
            opponent = maximiser if spec is None else spec.build(self.game)  # a fresh bot each
            state = self.game.new_initial_state()
            records = []
            for t in range(rounds):
                for player in range(2):
                    state.apply_action(int(group_values[g, t, player if seat == 0 else 1 - player]))
                decision = state.decision(seat)
                row = self.row[decision.info_key]
                bid = int(
                    min(
                        np.searchsorted(cumulative[row], rng.random() * cumulative[row, -1], side="right"),
                        self.solver.k - 1,
                    )
                )
                other = opponent.act([state.decision(1 - seat)], rng)[0].action
                states[r, t], actions[r, t] = row, bid
                records.append(
                    DecisionRecord(t, decision.info_key, bid, decision.name_of(bid), decision.observation)
                )
                state.apply_actions((bid, other) if seat == 0 else (other, bid))
                if state.current_player() == CHANCE and len(state.rounds()) == t:
                    outcomes = state.chance_outcomes()
                    state.apply_action(outcomes[int(rng.integers(len(outcomes)))][0])
            episode = EpisodeRecord(opponent.name, "train", 0, seat, state.rounds(), records)
            utility[r] = self.weight[index] * episode.agent_payoffs.mean()
            collusion[r], externality[r] = self.episode_events(episode, index)
        return Rollouts(
            states, actions, np.ones_like(states, dtype=bool), group_of, utility, collusion, externality
        )
