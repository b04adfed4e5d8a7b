"""Population analysis: the empirical meta-game between agents, its equilibria, and diversity.

Each agent is a strategy of a symmetric two-player meta-game: P[i, j] is agent i's mean payoff
per round when it plays agent j (seats alternating, so neither seat is favoured). The row player
of the meta-game gets P[i, j] and the column player P[j, i].

- Payoffs: exact when the domain's solver has a head-to-head and every agent gives its action
  table at the solver's information states, otherwise sampled by playing episodes in the domain.
- Nash mix: for a zero-sum meta-game (P = -P^T) the maximum-entropy maximin mix, which is unique
  ("Nash averaging"; an LP vertex would understate diversity); otherwise the symmetric
  equilibria found by support enumeration, the most diverse one used for the indices.
- Correlated equilibrium of the meta-game at maximum welfare.
- Exploitability of agent i within the population: the most any population member gains
  against a population made only of i, max_j P[j, i] - P[i, i].
- Diversity: entropy of the Nash mix (in nats, and divided by log k), its effective number of
  strategies exp(entropy), and the share of the most common strategy; a share at or above
  `monoculture_share` flags monoculture.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.optimize import linprog, minimize

from sepo.analysis import MIN_PAIR_EPISODES
from sepo.analysis.equilibria import correlated_equilibrium, nash_equilibria_2p, solve_zero_sum
from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.io import as_name_list, numeric_tensor, read_data, require_key, require_mapping
from sepo.analysis.normal_form import NormalFormGame


@dataclass(frozen=True, eq=False)
class MetaGame:
    """Agents' names, P[i, j] (agent i's payoff per round against agent j), how P was obtained,
    and its standard errors when sampled."""

    agents: tuple[str, ...]
    payoffs: np.ndarray
    method: str
    standard_errors: np.ndarray | None = None
    source: str = "<memory>"

    def game(self) -> NormalFormGame:
        return NormalFormGame(
            ("row", "column"),
            (self.agents, self.agents),
            np.stack([self.payoffs, self.payoffs.T]),
            name="meta-game",
            source=self.source,
        )

    def is_zero_sum(self, tol: float = 1e-9) -> bool:
        return bool(
            np.allclose(
                self.payoffs,
                -self.payoffs.T,
                rtol=0.0,
                atol=tol * max(1.0, float(np.abs(self.payoffs).max())),
            )
        )


def load_matrix(path: str | Path) -> MetaGame:
    """A meta-game from YAML/JSON: `agents: [..]` and `payoffs: [[..]]` (row agent vs column agent)."""
    source = str(path)
    data = require_mapping(read_data(path), source, "top level")
    agents = as_name_list(require_key(data, "agents", source), source, "agents", min_length=2)
    k = len(agents)
    payoffs = numeric_tensor(
        require_key(data, "payoffs", source),
        [(k, "one row per agent"), (k, "one entry per opponent agent")],
        source,
        "payoffs",
    )
    return MetaGame(agents, payoffs, "matrix file", None, source)


def build_meta_game(
    game_name: str, specs: Sequence[str], *, episodes: int = 200, seed: int = 0, progress=None,
    game_params: dict | None = None,
) -> MetaGame:
    """Load each agent spec in `game_name` and fill the payoff matrix: exact where the domain's
    solver has a head-to-head and every agent gives a table, otherwise sampled play (`episodes` per pair of
    agents, half in each starting seat; `progress(done, total)` after each pair). `game_params`: the
    game's parameters (its `--PARAM` options, converted), as every command takes them."""
    from sepo.errors import SepoError
    from sepo.games import load_game
    from sepo.metrics.exact import solver_for
    from sepo.policies.specs import load_agent, policy_table

    if len(specs) < 2:
        raise AnalysisInputError(
            "--agents", "agents", f"a population needs at least two agents, got {len(specs)}"
        )
    if len(set(specs)) != len(specs):
        raise AnalysisInputError("--agents", "agents", "an agent spec is listed twice")
    try:
        domain = load_game(game_name, **(game_params or {}))
    except SepoError as error:
        raise AnalysisInputError("--game", game_name, str(error)) from None
    agents = []
    for spec in specs:
        try:
            agents.append(load_agent(spec, domain))
        except SepoError as error:
            raise AnalysisInputError("--agents", spec, str(error)) from None
    solver = solver_for(domain)
    head_to_head = getattr(solver, "head_to_head", None)
    if head_to_head is not None:
        decisions = solver.decisions()
        tables = [policy_table(agent, decisions) for agent in agents]
        if all(t is not None for t in tables):
            stacked = np.stack(tables)
            payoffs = head_to_head(stacked[:, None], stacked[None, :])
            return MetaGame(
                tuple(specs), np.asarray(payoffs, dtype=float), "exact (the domain solver's head_to_head)"
            )
    return _sampled_meta_game(domain, tuple(specs), agents, episodes, seed, progress)


def _sampled_meta_game(domain, specs, agents, episodes: int, seed: int, progress=None) -> MetaGame:
    """Mean payoff per round from played episodes, each unordered pair played once: its episodes
    give P[i, j] (agent i's payoffs) and P[j, i] (agent j's), so a zero-sum domain yields an
    exactly zero-sum sample. In self-play both players are agent i, so P[i, i] averages them.
    Episode seeds come from `default_rng([seed, i, j, seat])`: the same seed, the same matrix.
    `progress(done, total)` is called after each pair."""
    from sepo.evaluation.play import play_episodes
    from sepo.limits import check_episodes

    if episodes < MIN_PAIR_EPISODES:
        raise AnalysisInputError(
            "--episodes", "episodes", f"need at least {MIN_PAIR_EPISODES} episodes per pair, got {episodes}"
        )
    # one seat's episodes are held at a time
    check_episodes(domain, episodes // 2 + 1, 1, "one pair of agents")
    k = len(agents)
    payoffs, errors = np.zeros((k, k)), np.zeros((k, k))
    pairs = [(i, j) for i in range(k) for j in range(i, k)]
    for done, (i, j) in enumerate(pairs, start=1):
        mine, theirs = [], []
        for seat in (0, 1):
            count = episodes // 2 + (episodes % 2) * (1 - seat)
            draws = np.random.default_rng([seed, i, j, seat]).integers(0, 2**31 - 1, size=count + 1)
            opponent = _self_play_partner(specs[j], agents[j], domain) if i == j else agents[j]
            records = play_episodes(
                domain,
                agents[i],
                [opponent] * count,
                draws[1:].tolist(),
                agent_seed=int(draws[0]),
                agent_player=seat,
            )
            mine += [r.agent_payoffs.mean() for r in records]
            theirs += [r.opponent_payoffs.mean() for r in records]
        mine, theirs = np.array(mine), np.array(theirs)
        if i == j:
            both = (mine + theirs) / 2
            payoffs[i, i], errors[i, i] = both.mean(), _standard_error(both)
        else:
            payoffs[i, j], errors[i, j] = mine.mean(), _standard_error(mine)
            payoffs[j, i], errors[j, i] = theirs.mean(), _standard_error(theirs)
        if progress is not None:
            progress(done, len(pairs))
    return MetaGame(specs, payoffs, f"sampled ({episodes} episodes per pair of agents)", errors)


def _standard_error(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / np.sqrt(len(values)))


def _self_play_partner(spec: str, agent, domain):
    """The opponent for an agent's self-play: a second instance when the agent keeps per-episode
    state (it overrides `reset`), so the two seats do not share memory; else the same object
    (a second copy of a language model would only cost memory)."""
    from sepo.policies.base import Policy
    from sepo.policies.specs import load_agent

    return load_agent(spec, domain) if type(agent).reset is not Policy.reset else agent


@dataclass(frozen=True, eq=False)
class PopulationReport:
    meta: MetaGame
    nash_mixes: list[np.ndarray]
    nash_method: str
    nash_value: float | None
    exploitability: np.ndarray
    best_exploiter: list[str | None]
    rating: np.ndarray
    correlated: Any
    monoculture_share: float

    @property
    def mix(self) -> np.ndarray:
        """The Nash mix the diversity indices describe (the most diverse one found)."""
        return max(self.nash_mixes, key=_entropy)

    def diversity(self) -> dict:
        mix = self.mix
        entropy = _entropy(mix)
        k = len(mix)
        top = int(mix.argmax())
        return {
            "entropy_nats": entropy,
            "normalized_entropy": float(entropy / np.log(k)),
            "effective_strategies": float(np.exp(entropy)),
            "largest_share": float(mix[top]),
            "most_common": self.meta.agents[top],
            "monoculture": bool(mix[top] >= self.monoculture_share),
            "monoculture_threshold": self.monoculture_share,
        }

    def to_dict(self) -> dict:
        agents = self.meta.agents
        result = {
            "agents": list(agents),
            "method": self.meta.method,
            "payoffs": {a: dict(zip(agents, map(float, row))) for a, row in zip(agents, self.meta.payoffs)},
            "nash": {
                "method": self.nash_method,
                "value": self.nash_value,
                "mixes": [dict(zip(agents, map(float, m))) for m in self.nash_mixes],
            },
            "agents_report": {
                a: {
                    "exploitability_in_population": float(self.exploitability[i]),
                    "best_exploiter": self.best_exploiter[i],
                    "payoff_against_nash_mix": float(self.rating[i]),
                }
                for i, a in enumerate(agents)
            },
            "correlated_equilibrium_max_welfare": {
                "welfare": float(self.correlated.objective_value),
                "support": [
                    {"row": joint[0], "column": joint[1], "probability": p}
                    for joint, p in self.correlated.support(self.meta.game())
                ],
            },
            "diversity": self.diversity(),
        }
        if self.meta.standard_errors is not None:
            result["standard_errors"] = {
                a: dict(zip(agents, map(float, row))) for a, row in zip(agents, self.meta.standard_errors)
            }
        return result


def analyze_population(meta: MetaGame, monoculture_share: float = 0.9) -> PopulationReport:
    """Equilibria, exploitability within the population, ratings and diversity of a meta-game."""
    payoffs = meta.payoffs
    game = meta.game()
    if meta.is_zero_sum():
        solution = solve_zero_sum(game)
        mixes = [max_entropy_maximin(payoffs, solution.value)]
        method, value = "maximum-entropy maximin (zero-sum meta-game)", solution.value
    else:
        enumeration = nash_equilibria_2p(game)
        mixes = [x for x, y in enumeration.equilibria if np.allclose(x, y, atol=1e-9)]
        method = "symmetric equilibria by support enumeration" + (
            " (degenerate game: list may be incomplete)" if enumeration.degenerate else ""
        )
        value = None
        if not mixes:
            raise AnalysisInputError(
                meta.source,
                "payoffs",
                "support enumeration found no symmetric equilibrium (the meta-game is degenerate); perturb "
                "the payoffs slightly",
            )
    exploiters = payoffs.T - np.diag(payoffs)[:, None]  # [i, j] = P[j, i] - P[i, i]
    best = exploiters.argmax(axis=1)
    mix = max(mixes, key=_entropy)
    gains = exploiters.max(axis=1)
    tol = 1e-12 * max(1.0, float(np.abs(payoffs).max()))
    exploiter_names = [meta.agents[j] if gain > tol else None for j, gain in zip(best, gains)]
    return PopulationReport(
        meta,
        mixes,
        method,
        value,
        gains,
        exploiter_names,
        payoffs @ mix,
        correlated_equilibrium(game, "ce", "max-welfare"),
        monoculture_share,
    )


def max_entropy_maximin(payoffs: np.ndarray, value: float) -> np.ndarray:
    """The maximin mix of largest entropy: maximise H(x) over distributions x with x P >= value.
    Unique, since H is strictly concave. Three steps, because entropy solvers misbehave at the
    boundary of the simplex: (1) one LP per agent finds which agents can carry weight in some
    maximin mix, and the average of those LP solutions is an interior point of that face;
    (2) SLSQP maximises entropy on that face from there; (3) the result is blended with the
    interior point just enough that every maximin constraint holds again to LP precision.
    Weights are accurate to about 1e-7 (the flatness of entropy near its maximum)."""
    k = len(payoffs)
    scale = max(1.0, float(np.abs(payoffs).max()))
    guarantee = dict(
        A_ub=-payoffs.T,
        b_ub=np.full(k, -value + 1e-13 * scale),
        A_eq=np.ones((1, k)),
        b_eq=[1.0],
        bounds=(0, None),
    )
    vertices = []
    for i in range(k):
        result = linprog(-np.eye(k)[i], method="highs", **guarantee)
        if result.status == 0 and result.x[i] > 1e-7:
            vertices.append(np.clip(result.x, 0.0, None) / np.clip(result.x, 0.0, None).sum())
    if not vertices:
        raise RuntimeError("no maximin mix found for the meta-game")
    center = np.mean(vertices, axis=0)
    face = np.flatnonzero(np.max(vertices, axis=0) > 1e-7)
    reduced = payoffs[face]

    def negative_entropy(z):
        z = np.clip(z, 1e-300, None)
        return float(np.sum(z * np.log(z)))

    constraints = [{"type": "eq", "fun": lambda z: z.sum() - 1.0, "jac": lambda z: np.ones(len(z))},
                   {"type": "ineq", "fun": lambda z: z @ reduced - value, "jac": lambda z: reduced.T}]
    result = minimize(
        negative_entropy,
        center[face],
        jac=lambda z: np.log(np.clip(z, 1e-300, None)) + 1.0,
        bounds=[(0.0, 1.0)] * len(face),
        constraints=constraints,
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    x = np.zeros(k)
    x[face] = np.clip(result.x, 0.0, None)
    if not np.isfinite(x).all() or x.sum() <= 0:
        return center
    x /= x.sum()
    if _entropy(x) < _entropy(center):
        return center
    shortfall = value - x @ payoffs  # > 0 where x misses a maximin constraint
    room = value - center @ payoffs  # <= 0 (up to LP precision): center meets every constraint
    bad = shortfall > 0
    if bad.any():
        blend = float(np.max(shortfall[bad] / np.maximum(shortfall[bad] - room[bad], 1e-300)))
        x = (1 - min(blend, 1.0)) * x + min(blend, 1.0) * center
    return x


def _entropy(mix: np.ndarray) -> float:
    positive = mix[mix > 0]
    return float(-(positive * np.log(positive)).sum())
