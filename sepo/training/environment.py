"""What a domain gives the exact tabular SEPO trainer: its training environment.

The trainer (`sepo.training.tabular`) is the algorithm; a domain plugs in through
`Domain.training(game, train_specs, collusive_specs[, exploiter_specs, charges]) -> TabularEnvironment`
(the last two when the run charges collusion or externality, `sepo.games.credit.Charges`: the
environment then draws rollouts against the collusive partners and exploiters too, each credited
so that the charged c and x are evaluation's; `build_environment`):

- `keys`, `legal`: the information states (rows of the tabular parameterization, the solver's
  `decisions()` order) and which columns are legal actions there;
- `solver`: its exact solver (value, Danskin gradient, own reach);
- `training_reach(table)`: ρ(I), the probability that a training rollout reaches I (the
  agent's own reach times chance's and the pool's);
- `rollouts(table, groups, group_size, rng)`: sampled rollouts from `groups` start states (the
  opponent, seat and chance outcomes a group shares), `group_size` each, with their utility and
  the domain's collusion and externality events (its one definition, as in evaluation);
- `exact_metrics(table)`: exact utility against the train pool and the solver's value.

Optional: `use_self_play()` makes the rollouts' opponent the agent's own table (self-play);
`joint_advantages = True` with `rollouts(..., advantages=True)` fills `Rollouts.advantages`, which
Advantage Alignment needs.
"""
from __future__ import annotations

import inspect
from typing import Protocol

import numpy as np

from sepo.errors import SepoError
from sepo.games.credit import Charges
from sepo.games.records import Rollouts


def build_environment(factory, game, train, collusive, exploiters, charges: Charges, what: str):
    """A domain's training environment (`factory`: its `training` or `llm_training`): called with
    the exploiter pool and the charges when the run charges collusion or externality, else as
    `factory(game, train, collusive)` (a run that charges neither meets the opponents it always
    met). A domain whose environment takes no pools for the charges is refused in one line."""
    if not (charges.collusion or charges.externality):
        return factory(game, train, collusive)
    from sepo.games.registry import resolved

    try:
        parameters = inspect.signature(resolved(factory)).parameters.values()
    except (TypeError, ValueError):
        parameters = ()
    takes = any(p.kind == p.VAR_POSITIONAL for p in parameters) or sum(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters) >= 5
    if not takes:
        raise SepoError(
            f"game {game.name!r}'s {what} environment cannot charge collusion or externality as evaluation "
            "counts them (it takes no exploiter pool and charges); leave --lambda-c and --lambda-x at 0"
        )
    return factory(game, train, collusive, exploiters, charges)


CAPABILITIES = {"self_play": "use_self_play", "joint_advantages": "joint_advantages"}
"""A training environment's optional capabilities, by the attribute that declares each."""


def offers(environment, capability: str) -> bool | None:
    """Whether a training environment offers `capability` (`CAPABILITIES`): self-play (its
    `use_self_play()`) or the advantages of both players Advantage Alignment needs. `environment` is
    a built one, or the factory a domain registers (`training`, `llm_training`), whose class answers
    by its attributes; None where a factory function cannot say before it builds one."""
    from sepo.games.registry import resolved

    if environment is None:
        return False
    found = resolved(environment) if inspect.isfunction(environment) else environment
    if inspect.isfunction(found):
        return None
    value = getattr(found, CAPABILITIES[capability], None)
    return callable(value) if capability == "self_play" else bool(value)


class TabularEnvironment(Protocol):
    keys: tuple[str, ...]
    legal: np.ndarray
    solver: object
    scale: float

    def training_reach(self, table: np.ndarray) -> np.ndarray: ...

    def rollouts(
        self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator
    ) -> Rollouts: ...

    def exact_metrics(self, table: np.ndarray) -> dict: ...


class LLMEnvironment(Protocol):
    """A domain's side of language-model SEPO-GRPO (`sepo.training.grpo`): contexts are agent
    decisions met on-policy, with the hidden state the domain needs; each has an `info_row` (its
    row in the solver's `decisions()`).

    Optional, for cheap talk (`sepo train --talk`): `context_opponent(context)` returns the
    context's opponent policy and that opponent's own decision this round, `(policy, decision)`,
    or None when the opponent has no policy that talks (e.g. a computed best response); the
    trainer shows its `message(decision)` in the prompt. Without the hook, prompts not carrying an
    injected message carry the benign control message.

    Optional `focus(rng, count) -> bool`: for an environment whose information states are too
    many to read the model at every step (and whose value decomposes over groups of them), draw
    the states the next step trains at (`count`: the step's groups; None: the final
    measurement's), replacing `solver` by one over those; True if it did. The trainer then reads
    the model at the new `solver.decisions()` only, and `sample_contexts` draws from them."""

    solver: object
    rounds_per_rollout: int
    """T, the rounds of the match a context belongs to (1 where a rollout is one hand): u and e are
    per round of it, a payoff to go sums up to T rounds, and the trainer charges a completion the
    attribution over ρ(I)/T (`sepo.training.grpo`, one objective with the tabular trainer)."""

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        """ρ(I): expected visits to I per match of the contexts' opponents (as the tabular one)."""

    def sample_contexts(self, table: np.ndarray, count: int, rng: np.random.Generator) -> list: ...

    def training_decision(self, context, rng: np.random.Generator):
        """The `Decision` (prompt) a context is shown as."""

    def outcome(self, table: np.ndarray, context, decision, action: int) -> tuple[float, float, float]:
        """(payoff, collusion events, externality events) to go of `action`: their expectations over
        its round and the rest of the match (the tabular rollouts' events are the match's)."""

    def exact_metrics(self, table: np.ndarray) -> dict: ...
