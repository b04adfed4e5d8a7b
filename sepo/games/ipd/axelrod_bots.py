"""Any strategy of the Axelrod library as an IPD player (`axelrod:NAME`).

The library is imported on first use only (it takes seconds). A strategy is told what a match
tells it: the number of rounds (`length`, which end-game strategies such as BackStabber need),
the payoff matrix as an `axelrod.Game`, and zero noise. In play, one live Axelrod player per
episode calls `strategy` then `update_history` each round, exactly as `axelrod.Match` does; a
stochastic strategy draws from its own generator, seeded from the episode's.

Exact action distributions (for the exact DP) are read by replaying histories on copies of the
player. Axelrod strategies draw their randomness through `RandomGenerator.random_choice(p)`
(C with probability p); a probe stands in for the generator, records p and forces the outcome.
A move is exact when it used no randomness, or exactly one `random_choice(p)` whose outcome is
the move (memory-one and ZD strategies, GTFT, Random). Any other use of randomness raises a
`SepoError` saying that this strategy's distribution cannot be read exactly. `ExactAxelrodBot`
serves these exact distributions as a vectorised bot (the training environments' forward passes
and batched matches).
"""
from __future__ import annotations

import copy
import difflib
import itertools
import re
import types
from functools import lru_cache

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.games.ipd.bots import IPDBot
from sepo.policies.base import Choice, Policy

PREFIX = "axelrod:"
_TEE = type(itertools.tee((), 1)[0])


@lru_cache(maxsize=1)
def _library():
    import axelrod

    return axelrod


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@lru_cache(maxsize=1)
def _index() -> dict:
    axl = _library()
    index = {}
    for cls in axl.all_strategies:
        index.setdefault(_norm(cls.__name__), cls)
        index.setdefault(_norm(cls.name), cls)
    return index


CHEATS = ("inspects_source", "manipulates_source", "manipulates_state")
"""Classifier flags of strategies that read their opponent's code or keep state outside the
player (Darwin's record lives on its class, shared by every copy and match): not one policy that
can be played or read by replay, so not offered."""


def _cheats(cls) -> bool:
    return any(cls.classifier.get(flag) for flag in CHEATS)


def strategy_class(name: str):
    """The Axelrod strategy class called `name` (class name or display name, any case/spacing)
    among `axelrod.all_strategies` (which already leaves out most strategies that read or rewrite
    their opponent's code), refusing those that still cheat (`CHEATS`)."""
    cls = _index().get(_norm(name))
    if cls is not None and _cheats(cls):
        flags = ", ".join(flag for flag in CHEATS if cls.classifier.get(flag))
        raise SepoError(
            f"Axelrod strategy {cls.__name__!r} is not offered: its classifier says {flags} (it reads its "
            "opponent or keeps state outside the player, so its moves are not one policy sepo can play or "
            "read)"
        )
    if cls is None:
        axl = _library()
        names = sorted({c.__name__ for c in axl.all_strategies if not _cheats(c)})
        near = difflib.get_close_matches(name, names, n=5, cutoff=0.5) or difflib.get_close_matches(
            _norm(name), [_norm(n) for n in names], n=5, cutoff=0.5)
        hint = f"; near matches: {', '.join(near)}" if near else "; see axelrod.all_strategies for names"
        raise SepoError(f"unknown Axelrod strategy {name!r}{hint}")
    return cls


class _NotReadable(Exception):
    pass


class _Probe:
    """Stands in for a player's random generator: records each random_choice(p), forces the outcome."""

    def __init__(self, forced):
        self.forced, self.calls = forced, []

    def random_choice(self, p: float = 0.5):
        axl = _library()
        self.calls.append(p)
        if p == 0:
            return axl.Action.D
        if p == 1:
            return axl.Action.C
        return self.forced

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise _NotReadable(name)


@lru_cache(maxsize=1)
def _opponent_class():
    axl = _library()

    class SepoAgent(axl.Player):
        """The sepo agent as the Axelrod strategy sees it: a history, no code to inspect."""

        name = "sepo agent"
        classifier = {
            "memory_depth": float("inf"),
            "stochastic": True,
            "long_run_time": False,
            "inspects_source": False,
            "manipulates_source": False,
            "manipulates_state": False,
            "makes_use_of": set(),
        }

        def strategy(self, opponent):
            raise RuntimeError("the sepo agent's moves come from sepo, not from Axelrod")

    return SepoAgent


def _copy_player(player):
    """A deep copy of an Axelrod player that shares what no move changes: its random generator,
    classifier and match attributes. (Copying through the class would rerun Axelrod's
    metaclass, which reads source code: milliseconds per copy.) A generator in its state (the
    sequence players, e.g. ThueMorse) cannot be copied; it is replaced in the player by a `tee`
    of itself, whose copy continues from the same position independently."""
    shared = {}
    for value in (getattr(player, "_random", None), player.classifier, player.match_attributes):
        if value is not None:
            shared[id(value)] = value
    for name, value in list(player.__dict__.items()):
        if isinstance(value, types.GeneratorType):
            value = player.__dict__[name] = itertools.tee(value, 1)[0]
        if isinstance(value, _TEE):
            shared[id(value)] = copy.copy(value)
    new = object.__new__(type(player))
    try:
        new.__dict__.update(copy.deepcopy(player.__dict__, shared))
    except (TypeError, copy.Error) as error:
        raise SepoError(
            f"the Axelrod strategy {type(player).__name__} cannot be copied ({error}); sepo replays "
            "copies of it to play and read it"
        ) from None
    return new


def _copy_pair(pair):
    return _copy_player(pair[0]), _copy_player(pair[1])


class AxelrodPlayer(Policy):
    """An Axelrod strategy as a sepo policy for the IPD."""

    def __init__(self, strategy: str, **params):
        self.cls = strategy_class(strategy)
        self.params = params
        try:
            probe = self.cls(**params)
        except TypeError as error:
            raise SepoError(
                f"bad parameters {params} for Axelrod strategy {self.cls.__name__!r}: {error}"
            ) from None
        self.name = (
            PREFIX
            + self.cls.__name__
            + (f"({', '.join(f'{k}={v}' for k, v in sorted(params.items()))})" if params else "")
        )
        self.classifier = dict(probe.classifier)
        self._live = None
        self._states: dict = {}
        self._context = None
        self._prototype = None

    # -- one match, played live ----------------------------------------------------------------
    def reset(self) -> None:
        self._live = None

    def _new_pair(self, observation):
        """A fresh (strategy, sepo agent) pair told the match's length and payoffs."""
        axl = _library()
        v = observation["payoffs"]
        context = (observation["rounds"], tuple(sorted(v.items())))
        if self._prototype is None or self._prototype[0] != context:
            player, agent = self.cls(**self.params), _opponent_class()()
            for p in (player, agent):
                p.set_match_attributes(
                    length=observation["rounds"],
                    game=axl.Game(r=v["R"], s=v["S"], t=v["T"], p=v["P"]),
                    noise=0,
                )
            self._prototype = (context, (player, agent))
        return _copy_pair(self._prototype[1])

    def act(self, decisions: list[Decision], rng) -> list[Choice]:
        axl = _library()
        choices = []
        for decision in decisions:
            history = decision.observation["history"]
            live = self._live
            if (
                live is None
                or live["history"] != tuple(history[: len(live["history"])])
                or len(live["history"]) + 1 != len(history) + (not live["pending"])
            ):
                player, agent = self._new_pair(decision.observation)
                player.set_seed(int(rng.integers(2**31)))
                live = self._live = {"player": player, "agent": agent, "history": (), "pending": False}
                for own, other in history:  # a fresh replay: our moves are what the history says
                    self._advance(live, own, other, call=True)
            elif live["pending"] and len(history) == len(live["history"]) + 1:
                self._advance(live, *history[-1], call=False)
            move = live["player"].strategy(live["agent"])
            live["pending"] = True
            choices.append(Choice(0 if move == axl.Action.C else 1))
        return choices

    def _advance(self, live, own: int, other: int, call: bool) -> None:
        axl = _library()
        if call:
            live["player"].strategy(live["agent"])
        moves = (axl.Action.C, axl.Action.D)
        live["player"].update_history(moves[own], moves[other])
        live["agent"].update_history(moves[other], moves[own])
        live["history"] = live["history"] + ((own, other),)
        live["pending"] = False

    # -- exact distributions, by replay ----------------------------------------------------------
    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        p = self.cooperate_probability_at(decision.observation, tuple(decision.observation["history"]))
        return {0: p, 1: 1.0 - p}

    def cooperate_probability_at(self, observation, history: tuple) -> float:
        """P(COOPERATE) after `history` ((own, other) pairs) in a match described by `observation`."""
        context = (observation["rounds"], tuple(sorted(observation["payoffs"].items())))
        if context != self._context:
            self._context, self._states = context, {(): {"before": self._new_pair(observation)}}
        return self._probed(history)["p"]

    def _probed(self, history: tuple) -> dict:
        """The node of `history`: P(C) and the pair after the move, by forced outcome (C, D)."""
        node = self._node(history)
        if "p" in node:
            return node
        axl = _library()
        before = node.pop("before")
        trials = [before] if not self.classifier.get("stochastic") else [_copy_pair(before), before]
        outcomes, calls = [], []
        for forced, (player, agent) in zip((axl.Action.C, axl.Action.D), trials):
            generator, probe = getattr(player, "_random", None), _Probe(forced)
            player._random = probe
            try:
                outcomes.append(player.strategy(agent))
            except _NotReadable as error:
                raise SepoError(
                    f"{self.name} draws randomness through {error.args[0]!r}; its action distribution "
                    "cannot be read exactly (use pool metrics for it)"
                ) from None
            # e.g. team strategies whose members draw from generators of their own
            except AttributeError as error:
                raise SepoError(
                    f"{self.name} cannot be replayed on a copy ({error}); its action distribution cannot be "
                    "read exactly (use pool metrics for it)"
                ) from None
            finally:
                player._random = generator
            calls.append(probe.calls)
        if len(trials) == 1 or not calls[0] or all(p in (0, 1) for p in calls[0]):
            if len(set(outcomes)) > 1:
                raise SepoError(
                    f"{self.name}: replay is not deterministic; its distribution cannot be read exactly"
                )
            node["p"] = float(outcomes[0] == axl.Action.C)
        elif len(calls[0]) == 1 and outcomes == [axl.Action.C, axl.Action.D]:
            node["p"] = float(calls[0][0])
        else:
            raise SepoError(
                f"{self.name} combines several random draws in one move; its action distribution cannot be "
                "read exactly"
            )
        node["after"] = {0: trials[0], 1: trials[-1]}  # own move C or D was the forced outcome
        return node

    def _node(self, history: tuple) -> dict:
        """The node of `history`, made from its parent's state after the recorded move."""
        if history not in self._states:
            axl = _library()
            parent = self._probed(history[:-1])
            own, other = history[-1]
            player, agent = _copy_pair(parent["after"][own])
            moves = (axl.Action.C, axl.Action.D)
            player.update_history(moves[own], moves[other])
            agent.update_history(moves[other], moves[own])
            self._states[history] = {"before": (player, agent)}
        return self._states[history]


class ExactAxelrodBot(IPDBot):
    """An Axelrod strategy as a vectorised `IPDBot` of one game: P(COOPERATE) at each history read
    exactly by replay (`AxelrodPlayer.cooperate_probability_at`, cached per history)."""

    def __init__(self, player: AxelrodPlayer, game):
        self.player = player
        self.name = player.name
        self.classifier = dict(player.classifier)
        self.observation = {"rounds": game.rounds, "payoffs": game.payoffs.rstp(1)}  # the bot sits in seat 1

    def cooperate_probability(self, own, other):
        return np.array(
            [
                self.player.cooperate_probability_at(self.observation, tuple(zip(mine, theirs)))
                for mine, theirs in zip(own.tolist(), other.tolist())
            ],
            dtype=float,
        ).reshape(own.shape[0])
