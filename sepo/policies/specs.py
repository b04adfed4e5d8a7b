"""Agent specs: one string names any agent the CLI can evaluate or train.

    nash | nash:ALPHA        a Kuhn Nash equilibrium from the alpha family (default 1/3)
    uniform                  every legal action equally likely
    bot:NAME | bot:NAME(k=v) a scripted bot of the game
    tabular:FILE.json        information-state key -> action probabilities
    run:DIR                  the policy a `sepo train` run produced
    hf:PATH_OR_ID            a Hugging Face causal LM (needs the `llm` extra)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Game
from sepo.policies.base import Policy
from sepo.policies.tabular import TabularPolicy

KINDS = ("nash", "uniform", "bot", "tabular", "run", "hf")


def load_agent(spec: str, game: Game) -> Policy:
    """The policy named by `spec` for `game`; a clear error for anything unknown."""
    kind, _, arg = spec.partition(":")
    if kind == "nash":
        _require_kuhn(game, spec)
        from sepo.metrics.kuhn_exact import nash_policy

        alpha = 1.0 / 3.0 if not arg else _number(arg, spec)
        try:
            table = nash_policy(alpha)
        except ValueError as error:
            raise SepoError(f"agent {spec!r}: {error}") from None
        return TabularPolicy(table, name=spec)
    if kind == "uniform":
        _require_kuhn(game, spec)
        return TabularPolicy(np.full((12, 2), 0.5), name="uniform")
    if kind == "bot":
        from sepo.opponents.pools import BEST_RESPONSE, parse_bot

        bot = parse_bot(game.name, arg)
        if bot.name == BEST_RESPONSE:
            raise SepoError("BestResponse is an opponent computed against an agent, not an agent spec")
        return bot.build()
    if kind == "tabular":
        _require_kuhn(game, spec)
        return TabularPolicy.load(arg)
    if kind == "run":
        return _load_run(Path(arg), game)
    if kind == "hf":
        return _hf_agent(arg, game)
    raise SepoError(f"unknown agent spec {spec!r}; use one of: nash[:ALPHA], uniform, bot:NAME, tabular:FILE.json, run:DIR, hf:PATH")


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


def _require_kuhn(game: Game, spec: str) -> None:
    if game.name != "kuhn":
        raise SepoError(f"agent {spec!r} is defined for kuhn only, not {game.name!r}")


def _number(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SepoError(f"agent {spec!r}: {text!r} is not a number") from None


def policy_table(agent: Policy) -> np.ndarray | None:
    """The agent's action probabilities at every information state, if it can give them."""
    table = getattr(agent, "table", None)
    if table is not None:
        return np.asarray(table, dtype=float)
    if getattr(agent, "mode", None) == "sample" and hasattr(agent, "model"):
        from sepo.policies.hf import HFPolicy

        # read the distribution by scoring each action after the model's own greedy reasoning:
        # exact for the model's conditional, and no sampling noise
        agent = HFPolicy(agent.model, agent.text, mode="score", tokenizer=agent.tokenizer, name=agent.name)
    method = getattr(agent, "kuhn_strategy", None)
    return None if method is None else np.asarray(method(), dtype=float)
