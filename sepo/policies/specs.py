"""Agent specs: one string names any agent the CLI can evaluate or train, in any domain.

    uniform                  every legal action equally likely
    bot:NAME | bot:NAME(k=v) a scripted bot of the game
    tabular:FILE.json        information-state key -> action probabilities (checked against the
                             keys of the domain's exact solver, when it has one)
    run:DIR                  the policy a `sepo train` run produced
    hf:PATH_OR_ID            a Hugging Face causal LM (needs the `llm` extra)
    openai:MODEL@URL         a chat model behind an OpenAI-compatible endpoint (the `endpoint` extra)
    KIND[:ARG]               an agent kind the domain defines (`Domain.agents`, e.g. an
                             equilibrium family)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, Game
from sepo.games.registry import domain_of
from sepo.policies.base import Policy
from sepo.policies.replies import Decoding
from sepo.policies.tabular import TabularPolicy

KINDS = ("uniform", "bot", "tabular", "run", "hf", "openai")


class UniformPolicy(Policy):
    """Every legal action with the same probability."""

    name = "uniform"

    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        return {a: 1.0 / len(decision.legal_actions) for a in decision.legal_actions}


def load_agent(spec: str, game: Game, decoding: Decoding | None = None) -> Policy:
    """The policy named by `spec` for `game`; a clear error for anything unknown."""
    kind, _, arg = spec.partition(":")
    domain = domain_of(game)
    if kind in domain.agents:
        return domain.agents[kind](arg, game)
    if kind == "uniform":
        return UniformPolicy()
    if kind == "bot":
        from sepo.opponents.pools import BEST_RESPONSE, parse_bot

        bot = parse_bot(game.name, arg)
        if bot.name == BEST_RESPONSE:
            raise SepoError("BestResponse is an opponent computed against an agent, not an agent spec")
        return bot.build(game)
    if kind == "tabular":
        return _load_tabular(arg, game)
    if kind == "run":
        return _load_run(Path(arg), game)
    if kind == "hf":
        return _hf_agent(arg, game)
    if kind == "openai":
        from sepo.policies.endpoint import EndpointAgent, parse_endpoint_spec

        return EndpointAgent(*parse_endpoint_spec(arg), game.text, decoding)
    kinds = [*(f"{k}[:ARG]" for k in domain.agents), "uniform", "bot:NAME", "tabular:FILE.json", "run:DIR", "hf:PATH",
             "openai:MODEL@URL"]
    raise SepoError(f"unknown agent spec {spec!r} for {game.name}; use one of: {', '.join(kinds)}")


def _load_tabular(path: str, game: Game) -> TabularPolicy:
    from sepo.metrics.exact import keys_of, solver_for

    solver = solver_for(game)
    if solver is None:
        return TabularPolicy.load(path)
    decisions = solver.decisions()
    return TabularPolicy.load(path, keys_of(decisions), num_actions=max(len(d.legal_actions) for d in decisions))


def _hf_agent(path: str, game: Game) -> Policy:
    """A language model that plays by writing replies (sampled at temperature 1, parsed strictly,
    failures resolved by forced decoding and counted)."""
    from sepo.policies.hf import HFPolicy

    return HFPolicy(path, game.text, mode="sample", failure_rule="forced", temperature=1.0, max_new_tokens=48)


def _load_run(run_dir: Path, game: Game) -> Policy:
    if (run_dir / "model").is_dir():
        return _hf_agent(str(run_dir / "model"), game)
    from sepo.training.tabular import load_run_policy

    return load_run_policy(run_dir)


def policy_table(agent: Policy, decisions: list[Decision] | None) -> np.ndarray | None:
    """The agent's action table at `decisions` (the solver's information states): the policy it
    plays (`policy_estimate`; for a text agent exact or estimated from its replies), or None when
    there are no decisions or the agent cannot give probabilities."""
    if not decisions:
        return None
    from sepo.policies.text_policy import policy_estimate

    try:
        return policy_estimate(agent, decisions).table()
    except NotImplementedError:
        return None
