"""Batched play: every episode advances together, one `act` call per turn for all pending
agent decisions (one batched model call for an LLM agent).

Games have n >= 2 players: the agent sits in one seat and every other seat is played by an
opponent policy (one policy per episode for all other seats, or a mapping seat -> policy). At a
simultaneous node the opponents' actions are collected first, then the agent's, and the joint
action is applied. Chance and the opponents draw from the episode's own generator (seeded per
episode), the agent from one generator per batch, so the same seeds give the same episodes.

Cheap talk (`talk=TalkChannel(...)`, for domains with `Domain.talk`): before the decisions of
each round every player's policy may send a message (`sepo.games.talk`); it is cleaned by the
channel and attached, as data, to the other players' decisions of that round. The game state
never sees it. The agent's messages are asked for all waiting episodes at once (one batched
`write_messages` call per round for a language-model agent), before any opponent of the round
acts; an agent decision does not show the agent its own message (each decision is one stateless
chat, as in training), and its record keeps it (`DecisionRecord.message`).
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence, Union

import numpy as np

from sepo.games import talk as talk_channel
from sepo.games.base import CHANCE, SIMULTANEOUS, Game
from sepo.games.records import DecisionRecord, EpisodeRecord
from sepo.policies.base import Choice, Policy

Opponents = Union[Policy, Mapping[int, Policy]]


def play_episodes(
    game: Game,
    agent: Policy,
    opponents: Sequence[Opponents],
    seeds: list[int],
    *,
    agent_seed: int,
    opponent_label: str = "",
    pool: str = "",
    agent_player: int = 0,
    keep_text: bool = False,
    talk: "talk_channel.TalkChannel | None" = None,
    on_finished: Callable[[int], None] | None = None,
) -> list[EpisodeRecord]:
    """Play one episode per seed, episode i against `opponents[i]` (a policy for every other
    seat, or a mapping from seat to policy); with `talk`, the players' messages are exchanged.
    `on_finished(n)` hears of the episodes that ended since it was last called (progress)."""
    states = [game.new_initial_state() for _ in seeds]
    for state in states:
        state.seat_agent(agent_player)
    rngs = [np.random.default_rng(seed) for seed in seeds]
    agent_rng = np.random.default_rng(agent_seed)
    records = [EpisodeRecord(opponent_label, pool, seed, agent_player, []) for seed in seeds]
    seat_policies = [_by_seat(o) for o in opponents]
    for policy in {id(p): p for table in seat_policies for p in table.values()}.values():
        policy.reset()
    agent.reset()
    pending_joint: dict[int, dict[int, int]] = {}
    said: dict[int, tuple[int, dict[int, str | None]]] = {}  # episode -> (round, seat -> message)
    agent_said: dict[int, tuple[int, object]] = {}  # episode -> (round, the agent's message, not yet cleaned)
    agent_talks = talk is not None and talk_channel.talks(agent)

    def needs_agent_message(i: int) -> bool:
        """Whether episode i waits for the agent's message of this round (asked in one batch)."""
        if not agent_talks:
            return False
        this_round = len(states[i].rounds())
        return (said.get(i, (None,))[0] != this_round and agent_player in states[i].acting_players()
                and agent_said.get(i, (None,))[0] != this_round)

    def decide(i: int, player: int):
        """`player`'s decision in episode i, with the other players' messages of this round."""
        decision = states[i].decision(player)
        if talk is None:
            return decision
        this_round = len(states[i].rounds())
        if said.get(i, (None,))[0] != this_round:
            said[i] = (this_round, {})
            for p in states[i].acting_players():
                if p == agent_player:
                    spoken = agent_said.pop(i, (this_round, None))[1] if agent_talks else None
                else:
                    spoken = talk_channel.message_of(seat_policies[i][p], states[i].decision(p))
                said[i][1][p] = talk.clean(spoken)
        return talk_channel.with_messages(decision, [m for p, m in sorted(said[i][1].items()) if p != player])

    reported = 0
    while True:
        if on_finished is not None:
            ended = sum(state.is_terminal() for state in states)
            if ended > reported:
                on_finished(ended - reported)
                reported = ended
        waiting, speaking = [], []
        for i, state in enumerate(states):
            while not state.is_terminal():
                player = state.current_player()
                if player == CHANCE:
                    outcomes = state.chance_outcomes()
                    probs = np.array([p for _, p in outcomes])
                    state.apply_action(outcomes[_draw(probs, rngs[i])][0])
                    continue
                if needs_agent_message(i):
                    speaking.append(i)
                    break
                if player == SIMULTANEOUS:
                    joint = pending_joint.setdefault(i, {})
                    for other in state.acting_players():
                        if other != agent_player and other not in joint:
                            joint[other] = _opponent_action(seat_policies[i], decide(i, other), rngs[i])
                    if agent_player in state.acting_players():
                        waiting.append(i)
                        break
                    state.apply_actions(_joint_list(pending_joint.pop(i), state))
                    continue
                if player != agent_player:
                    state.apply_action(_opponent_action(seat_policies[i], decide(i, player), rngs[i]))
                    continue
                waiting.append(i)
                break
        if speaking:  # the agent's messages first, one batched call; then every episode moves on
            spoken = talk_channel.messages_of(agent, [states[i].decision(agent_player) for i in speaking])
            for i, message in zip(speaking, spoken):
                agent_said[i] = (len(states[i].rounds()), message)
            continue
        if not waiting:
            break
        decisions = [decide(i, agent_player) for i in waiting]
        choices = agent.act(decisions, agent_rng)
        for i, decision, choice in zip(waiting, decisions, choices):
            records[i].decisions.append(_record(states[i], decision, choice, keep_text,
                                                said[i][1].get(agent_player) if i in said else None))
            if states[i].current_player() == SIMULTANEOUS:
                joint = pending_joint.pop(i)
                joint[agent_player] = choice.action
                states[i].apply_actions(_joint_list(joint, states[i]))
            else:
                states[i].apply_action(choice.action)

    for record, state in zip(records, states):
        record.rounds = state.rounds()
    if on_finished is not None and len(states) > reported:
        on_finished(len(states) - reported)
    return records


def _by_seat(opponents: Opponents) -> Mapping[int, Policy] | "_Everyone":
    return opponents if isinstance(opponents, Mapping) else _Everyone(opponents)


class _Everyone(dict):
    """One policy for every other seat."""

    def __init__(self, policy: Policy):
        super().__init__({-1: policy})
        self.policy = policy

    def __missing__(self, seat):
        return self.policy


def _opponent_action(policies, decision, rng: np.random.Generator) -> int:
    return policies[decision.player].act([decision], rng)[0].action


def _joint_list(joint: dict[int, int], state) -> list[int]:
    return [joint[p] for p in range(state.num_players())]


def _record(state, decision, choice: Choice, keep_text: bool, message: str | None) -> DecisionRecord:
    return DecisionRecord(
        round=len(state.rounds()),
        info_key=decision.info_key,
        action=choice.action,
        action_name=decision.name_of(choice.action),
        observation=decision.observation,
        parse_status=choice.parse_status,
        rule=choice.rule,
        text=choice.text if keep_text else None,
        message=message,
    )


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    cumulative = np.cumsum(probs)
    return int(min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(probs) - 1))
