"""The exact-solver interface: what a domain's solver gives generic code.

A solver is keyed by the domain's information states: `decisions()` lists one canonical
`Decision` per agent information state, and an agent is an action table `[len(decisions),
width]` (probabilities in each decision's legal-action order, zero-padded), read from any policy
with one batched call (`action_table`). From a table the solver computes:

- `evaluate(table)`: the headline value (zero-sum: exploitability = NashConv / 2; general-sum:
  the adversarial gap max_σ E[u_O − u_A] per round), the best responder's payoff, the agent's
  payoff against it, the method, whether it is exact, and a bound on any pruning error;
- `best_response(table)`: the maximising opponent as a stateless policy that can play (episodes
  may share one instance);
- `gradient(table)`: d value / d table with the maximiser held fixed (Danskin), the input of
  SEPO's per-rollout attribution;
- `own_reach(table)`: the agent's own probability of reaching each information state;
- optionally `head_to_head(table, opponent_tables)`: the agent's exact payoff per round against
  opponents given as tables.

Domains implement it in `sepo/games/<name>/exact.py` and return it from `Domain.solver(game)`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision, Game
from sepo.policies.base import Policy


@dataclass(frozen=True)
class ExactResult:
    """One exact (or bounded) evaluation of an agent's action table."""

    value: float
    value_name: str
    br_payoff: float
    agent_payoff: float
    method: str
    exact: bool = True
    pruning_bound: float = 0.0
    extra: Mapping[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(out.pop("extra"))
        return out


PROJECTION_NOTE = (
    "the gap of the agent's memory-{m} projection (the memory-{m} policy that plays as the agent does "
    "where each state first occurs), not of the agent, which may read more: neither an upper nor a lower "
    "bound on the agent's gap"
)
SAMPLED_NOTE = (
    "the gap of a policy estimated from sampled replies is biased upward where best responses tie (a kink): "
    "read the interval, whose lower end allows for it"
)
ANSWER_LINES_NOTE = (
    "the policy was read from the answer lines' exact probabilities, which leave up to {rest:.2%} of the "
    "replies at a prompt (renormalised over the answers where the failure rule reads the reply, else "
    "played by it): each action's probability is within that share of the played policy's, and nothing "
    "was sampled, so the value has no sampling interval"
)
POINT_ESTIMATE_NOTE = (
    "the lower bound was computed from a policy estimated from sampled replies: it is a point estimate "
    "of a lower bound, not itself a bound on the agent's true gap, and has no interval (the rival was "
    "chosen on the same replies it is measured on, so resampling them would not give a valid one); "
    "give --temperature 0, or a smaller game with --threshold, for a bound"
)


def estimate_note(policy: dict, point_estimate: bool) -> str:
    """The note for a value of a policy that was not read exactly (`policy`, its record): read from
    the answer lines within a share of the replies, a point estimate of a lower bound, or a sampled
    estimate whose interval allows for its bias."""
    if policy.get("rest") is not None and policy.get("replies_per_state") is None:
        return ANSWER_LINES_NOTE.format(rest=policy["rest"])
    return POINT_ESTIMATE_NOTE if point_estimate else SAMPLED_NOTE


def declared_memory(policy) -> int | None:
    """The past rounds a policy declares it reads (besides the round, where a domain's keys hold
    it): a finite `classifier["memory_depth"]` (Axelrod's meaning) or an integer `memory`
    attribute; None when it declares nothing (a language model) or reads the whole history."""
    for value in (
        (getattr(policy, "classifier", None) or {}).get("memory_depth"),
        getattr(policy, "memory", None),
    ):
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def reads_within(policy, memory: int | None, keys: Sequence[str] | None = None) -> bool:
    """Whether a memory-`memory` solve is exact for `policy`: the solver keeps the whole history
    (None), the policy is a table over the solver's own keys, or it declares at most `memory` rounds."""
    if memory is None:
        return True
    if (
        keys is not None
        and getattr(policy, "table", None) is not None
        and tuple(getattr(policy, "keys", ()) or ()) == tuple(keys)
    ):
        return True
    declared = declared_memory(policy)
    return declared is not None and declared <= memory


def as_projection(result: "ExactResult", memory: int) -> "ExactResult":
    """`result` relabelled as the gap of a memory-`memory` projection: not exact, and said so."""
    from dataclasses import replace

    return replace(
        result,
        exact=False,
        method=f"{result.method}; here the gap of the agent's memory-{memory} projection",
        extra={**result.extra, "projection_memory": memory},
    )


def labelled(
    result: "ExactResult", policy, memory: int | None, keys: Sequence[str] | None = None
) -> "ExactResult":
    """The solver's result for `policy`, exact only where the policy's known memory makes it so."""
    return result if reads_within(policy, memory, keys) else as_projection(result, memory)


@dataclass
class Audit:
    """One agent's audit, what `sepo exploit` prints and `sepo eval` reports: the solver's result
    (labelled), the maximising opponent, how the agent's policy was read (`policy_estimate`'s
    record, None when the agent was played rather than read), the sampling interval of the value
    for an estimated policy, and the estimate itself where it is a table at the solver's
    `decisions()` (for head-to-head values)."""

    result: "ExactResult"
    response: Policy | None
    policy: dict | None
    interval: list | None = None
    estimate: object | None = None


class NoActionProbabilities(SepoError):
    """The agent cannot state action probabilities, which an exact value needs."""


def no_action_probabilities(agent, error: NotImplementedError) -> NoActionProbabilities:
    """The refusal to name: a domain's own reason when it gave one (a SepoError, e.g. a projection
    the agent's prompts cannot show), else that the agent has no action probabilities."""
    if isinstance(error, SepoError):
        return NoActionProbabilities(str(error))
    return NoActionProbabilities(
        f"agent {getattr(agent, 'name', agent)!r} cannot give action probabilities, which exact values need"
    )


EXACT_LABELS = ("exact", "projection", "pruned", "lower bound")


def exact_label(result: "ExactResult", policy: dict | None = None) -> str:
    """What a value is, one word for every command: `exact`, `estimated` (the solver's exact value
    of a policy table estimated from sampled replies, given its `policy` record: nothing sampled is
    called exact), the gap of a memory-M `projection` (neither bound), a `pruned` tree's value
    (within `pruning_bound` of the exact one), or a `lower bound` (a search that plays the agent)."""
    if result.exact and policy is not None and not policy.get("read_exactly", True):
        return "estimated"
    if result.exact:
        return "exact"
    if "projection_memory" in result.extra:
        return "projection"
    return "pruned" if result.pruning_bound else "lower bound"


def audit_agent(game: Game, agent: Policy, solver, *, threshold: float = 0.0, projection: bool = False,
                replicates: int = 1000, seed: int = 0) -> Audit | None:
    """The one audit of an agent that `sepo exploit` and `sepo eval` share: a solver with
    `audit` (the repeated games) chooses its tree from what the agent declares (a declared
    state's DP, a table's own states, the memory-M projection when `projection` is asked for,
    else the whole history, pruned below `threshold`, refused in one line when it does not fit);
    any other solver reads the agent at every information state; without a solver, the domain's
    `lower_bound` search plays the agent. None when the domain has neither. `solver` is the
    game's (`exact_solver`), None where it has none."""
    if threshold and not 0.0 < threshold < 1.0:
        raise SepoError(f"--threshold must be in (0, 1), got {threshold}")
    if solver is None:
        from sepo.games.registry import domain_of

        search = domain_of(game).lower_bound
        if search is None:
            return None
        # (result, opponent), or an Audit where the search reads the agent's policy
        found = search(game, agent)
        return found if isinstance(found, Audit) else Audit(*found, None)
    try:
        audit = getattr(solver, "audit", None)
        if audit is not None:
            return audit(agent, threshold=threshold, projection=projection, replicates=replicates, seed=seed)
        if threshold:
            raise SepoError(f"the {game.name} solver reads whole tables; --threshold does not apply")
        return _audit_whole_table(solver, agent, replicates, seed)
    except NotImplementedError as error:
        raise no_action_probabilities(agent, error) from None


class _Unread(Exception):
    """The audit reached its first reading of the agent: every size check before it passed."""


class _Unreadable(Policy):
    """`agent` as the audit sees it before reading it: the same declarations (memory, state,
    table, whether it is estimated from replies), but any reading stops the audit."""

    def __init__(self, agent: Policy):
        self._agent = agent
        self.name = getattr(agent, "name", Policy.name)

    def __getattr__(self, name):
        value = getattr(self._agent, name)
        return self._stop if name == "estimate" and callable(value) else value

    def _stop(self, *_):
        raise _Unread

    action_probabilities = batch_action_probabilities = _stop


def check_audit_fits(
    game: Game, agent: Policy, solver, *, threshold: float = 0.0, projection: bool = False
) -> None:
    """`audit_agent`'s refusals (a tree or a prompt count that does not fit), raised without
    reading the agent: the same audit, stopped at its first reading. For an agent whose reading
    must wait (a language model read at the prompts it meets in play), so that a refusal comes
    before the play."""
    if solver is None:
        return
    decoding = getattr(agent, "decoding", None)
    source = getattr(agent, "source", None)
    if getattr(solver, "audit", None) is None and decoding is not None and not decoding.greedy:
        from sepo.policies.text_policy import MAX_SAMPLED_REPLIES, check_sampled_replies

        decisions, samples = solver.decisions(), getattr(agent, "samples", 1)
        exact = getattr(source, "reads_without_sampling", None)  # asked only when the count would be refused
        if len(decisions) * samples > MAX_SAMPLED_REPLIES and not (
            callable(exact) and exact(list(decisions))
        ):
            check_sampled_replies(len(decisions), samples, getattr(agent, "name", "the agent"))
    try:
        audit_agent(
            game, _Unreadable(agent), solver, threshold=threshold, projection=projection, replicates=1
        )
    except _Unread:
        return


def _audit_whole_table(solver, agent: Policy, replicates: int, seed: int) -> Audit:
    """A solver without `audit` (whole-game solvers): the agent read at every information state,
    one batched call; for an estimated policy, the value's interval from its resampled replies."""
    from sepo.metrics.bootstrap import boundary_interval
    from sepo.policies.text_policy import policy_estimate

    decisions = solver.decisions()
    estimate = policy_estimate(agent, decisions)
    table = estimate.table()
    result = labelled(solver.evaluate(table), agent, getattr(solver, "kept_memory", None), keys_of(decisions))
    interval = None
    if not estimate.exact:
        values = np.array([solver.evaluate(t).value for t in estimate.resample(replicates, seed)])
        interval = list(boundary_interval(result.value, values))
    return Audit(result, solver.best_response(table), estimate.record(), interval, estimate)


@runtime_checkable
class ExactSolver(Protocol):
    method: str
    value_name: str

    def decisions(self) -> list[Decision]: ...

    def evaluate(self, table: np.ndarray) -> ExactResult: ...

    def best_response(self, table: np.ndarray) -> Policy: ...

    def gradient(self, table: np.ndarray) -> np.ndarray: ...

    def own_reach(self, table: np.ndarray) -> np.ndarray: ...


class NoExactSolver(SepoError):
    """The domain has an exact solver, but not for this game: its settings rule one out (more
    players than the solver handles), or it would not fit the machine. The message says why, and what
    would."""


def check_exact_size(game: Game) -> None:
    """`NoExactSolver` when the game's exact solver would not fit the machine (before anything is built)."""
    from sepo.limits import memory_budget

    problem = game.exact_size(memory_budget())
    if problem is not None:
        raise NoExactSolver(problem)


def exact_solver(game: Game):
    """The game's exact solver; None when its domain has none; `NoExactSolver` (one line) when
    this game's settings rule it out or its estimated size (`Game.exact_size`, checked before
    anything is built) exceeds the machine's memory budget."""
    from sepo.games.registry import domain_of

    factory = domain_of(game).solver
    if factory is None:
        return None
    check_exact_size(game)
    return factory(game)


def solver_for(game: Game):
    """The game's exact solver, or None when there is none for it (see `exact_solver` for why)."""
    try:
        return exact_solver(game)
    except NoExactSolver:
        return None


def keys_of(decisions: Sequence[Decision]) -> tuple[str, ...]:
    return tuple(d.info_key for d in decisions)


def action_table(policy: Policy, decisions: Sequence[Decision]) -> np.ndarray:
    """`[len(decisions), max legal actions]`: the policy's probabilities, columns in legal-action
    order, from one batched call (a tabular policy over the same keys is read directly)."""
    keys = keys_of(decisions)
    if getattr(policy, "keys", None) == keys and hasattr(policy, "table"):
        return np.asarray(policy.table, dtype=float)
    rows = policy.batch_action_probabilities(list(decisions))
    width = max(len(d.legal_actions) for d in decisions)
    table = np.zeros((len(decisions), width))
    for r, (decision, probs) in enumerate(zip(decisions, rows)):
        for c, action in enumerate(decision.legal_actions):
            table[r, c] = probs.get(action, 0.0)
    return table


def uniform_table(decisions: Sequence[Decision]) -> np.ndarray:
    width = max(len(d.legal_actions) for d in decisions)
    table = np.zeros((len(decisions), width))
    for r, decision in enumerate(decisions):
        table[r, : len(decision.legal_actions)] = 1.0 / len(decision.legal_actions)
    return table
