"""Batched play: every episode advances together, one `act` call per turn for all pending
agent decisions (one batched model call for an LLM agent).

Chance and the opponent draw from the episode's own generator (seeded per episode), the agent
from one generator per batch, so the same seeds give the same episodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sepo.games.base import CHANCE, SIMULTANEOUS, Game, RoundResult
from sepo.policies.base import Choice, Policy


@dataclass
class DecisionRecord:
    round: int
    info_key: str
    action: int
    action_name: str
    facing_bet: bool
    card: int | None
    parse_status: str = "ok"
    rule: str | None = None
    text: str | None = None


@dataclass
class EpisodeRecord:
    """One played episode from the agent's point of view."""

    opponent: str
    pool: str
    seed: int
    agent_player: int
    rounds: list[RoundResult]
    decisions: list[DecisionRecord] = field(default_factory=list)

    @property
    def agent_payoffs(self) -> np.ndarray:
        return np.array([r.payoffs[self.agent_player] for r in self.rounds])

    @property
    def opponent_payoffs(self) -> np.ndarray:
        return np.array([r.payoffs[1 - self.agent_player] for r in self.rounds])


def play_episodes(game: Game, agent: Policy, opponents: list[Policy], seeds: list[int], *, agent_seed: int,
                  opponent_label: str = "", pool: str = "", agent_player: int = 0, keep_text: bool = False) -> list[EpisodeRecord]:
    """Play one episode per seed, episode i against `opponents[i]`."""
    states = [game.new_initial_state() for _ in seeds]
    rngs = [np.random.default_rng(seed) for seed in seeds]
    agent_rng = np.random.default_rng(agent_seed)
    records = [EpisodeRecord(opponent_label, pool, seed, agent_player, []) for seed in seeds]
    for opponent in opponents:
        opponent.reset()
    agent.reset()
    pending_joint: dict[int, dict[int, int]] = {}

    while True:
        waiting = []
        for i, state in enumerate(states):
            while not state.is_terminal():
                player = state.current_player()
                if player == CHANCE:
                    outcomes = state.chance_outcomes()
                    probs = np.array([p for _, p in outcomes])
                    state.apply_action(outcomes[_draw(probs, rngs[i])][0])
                    continue
                opponent_player = 1 - agent_player
                if player == opponent_player or (player == SIMULTANEOUS and opponent_player not in pending_joint.get(i, {})):
                    choice = opponents[i].act([state.decision(opponent_player)], rngs[i])[0]
                    if player == SIMULTANEOUS:
                        pending_joint.setdefault(i, {})[opponent_player] = choice.action
                    else:
                        state.apply_action(choice.action)
                        continue
                waiting.append(i)
                break
        if not waiting:
            break
        decisions = [states[i].decision(agent_player) for i in waiting]
        choices = agent.act(decisions, agent_rng)
        for i, decision, choice in zip(waiting, decisions, choices):
            records[i].decisions.append(_record(states[i], decision, choice, keep_text))
            if states[i].current_player() == SIMULTANEOUS:
                joint = pending_joint.pop(i)
                joint[agent_player] = choice.action
                states[i].apply_actions([joint[p] for p in range(states[i].num_players())])
            else:
                states[i].apply_action(choice.action)

    for record, state in zip(records, states):
        record.rounds = state.rounds()
    return records


def _record(state, decision, choice: Choice, keep_text: bool) -> DecisionRecord:
    obs = decision.observation
    return DecisionRecord(
        round=len(state.rounds()),
        info_key=decision.info_key,
        action=choice.action,
        action_name=decision.name_of(choice.action),
        facing_bet=bool(obs.get("facing_bet", False)),
        card=obs.get("card"),
        parse_status=choice.parse_status,
        rule=choice.rule,
        text=choice.text if keep_text else None,
    )


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    cumulative = np.cumsum(probs)
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(probs) - 1))
