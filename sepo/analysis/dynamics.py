"""Learning dynamics on normal-form games, measured by the gaps they are supposed to close.

Rules (every player runs the same rule, all with full information: each round a player sees
the payoff every one of its actions would have earned against the others' current play):

- fictitious play: play a best response to the others' empirical frequencies so far;
- replicator: the continuous-time ODE dx_a/dt = x_a (u(a) - u(x)), one population per player;
- Hedge: weights proportional to exp(eta * cumulative payoff);
- regret matching: play in proportion to positive cumulative regret (uniform when none).

`swap=True` turns Hedge or regret matching into a swap-regret learner by the Blum-Mansour
reduction: one copy of the rule per action a learns what to play "instead of a", the strategy
is the stationary distribution x = x Q of the copies' strategies Q, and copy a is fed the
payoffs scaled by x(a). External no-regret play drives the time-averaged joint distribution
towards the coarse correlated equilibria; swap no-regret play towards the correlated ones.

Each run records, over time, the current strategies, the time-averaged strategies, and the CE
and CCE gaps of the time-averaged joint distribution of play (`equilibria.correlation_gaps`),
and looks for a cycle in the current strategies after a transient.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp

from sepo.analysis.equilibria import correlation_gaps, product_distribution
from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame, Profile

RULES = ("fictitious", "replicator", "hedge", "regret-matching")


@dataclass(frozen=True)
class Cycle:
    """What the current strategies did after the transient.

    verdict: "cycle" (the trajectory left a point and came back to it at least twice),
    "converged" (it stopped moving), or "none" (it moved without returning)."""

    verdict: str
    returns: int
    period: float | None
    amplitude: float

    @property
    def detected(self) -> bool:
        return self.verdict == "cycle"

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "detected": self.detected, "returns": self.returns,
                "period": self.period, "amplitude": self.amplitude}


def detect_cycle(points: np.ndarray, *, step: float = 1.0, transient: float = 0.5,
                 settle_tol: float = 1e-6, return_fraction: float = 0.05) -> Cycle:
    """Recurrence test on a trajectory `[T, d]`: after dropping the first `transient` share,
    count how often it comes back within `return_fraction` of its largest excursion from the
    first remaining point, having gone more than half that excursion away in between.
    `period` is the mean time between returns, in units of `step`."""
    tail = np.asarray(points, dtype=float)[int(len(points) * transient):]
    distance = np.linalg.norm(tail - tail[0], axis=1)
    amplitude = float(distance.max())
    if amplitude <= settle_tol:
        return Cycle("converged", 0, None, amplitude)
    returns = []
    away, dip_start = False, None
    for t, d in enumerate(distance):
        if d > 0.5 * amplitude:
            if dip_start is not None:
                returns.append(dip_start + int(distance[dip_start:t].argmin()))
                dip_start = None
            away = True
        elif away and d <= return_fraction * amplitude and dip_start is None:
            dip_start = t
    if dip_start is not None:
        returns.append(dip_start + int(distance[dip_start:].argmin()))
    if len(returns) >= 2:
        return Cycle("cycle", len(returns), float(np.diff([0] + returns).mean() * step), amplitude)
    last = distance[int(len(distance) * 0.9):]
    if float(np.ptp(last)) <= settle_tol:
        return Cycle("converged", len(returns), None, amplitude)
    return Cycle("none", len(returns), None, amplitude)


@dataclass(frozen=True, eq=False)
class Trajectory:
    """A recorded run. `steps` are iteration numbers (times for the replicator); per player,
    `strategies[i]` and `averages[i]` are `[records, |A_i|]`; gaps are of the time-averaged
    joint distribution of play; `nash_conv` is that of the averaged marginals."""

    rule: str
    swap: bool
    steps: np.ndarray
    strategies: list[np.ndarray]
    averages: list[np.ndarray]
    ce_gap: np.ndarray
    cce_gap: np.ndarray
    nash_conv: np.ndarray
    cycle: Cycle
    average_joint: np.ndarray

    def final_average(self) -> Profile:
        return tuple(a[-1] for a in self.averages)

    def to_dict(self, game: NormalFormGame) -> dict:
        return {"rule": self.rule, "swap": self.swap, "iterations": float(self.steps[-1]),
                "final_average_strategies": game.describe_profile(self.final_average()),
                "final_strategies": game.describe_profile(tuple(s[-1] for s in self.strategies)),
                "ce_gap": float(self.ce_gap[-1]), "cce_gap": float(self.cce_gap[-1]),
                "nash_conv_of_average": float(self.nash_conv[-1]), "cycle": self.cycle.to_dict()}


class _Hedge:
    """Multiplicative weights on cumulative payoffs."""

    def __init__(self, size: int, eta: float):
        self.eta, self.cumulative = eta, np.zeros(size)

    def strategy(self) -> np.ndarray:
        weights = np.exp(self.eta * (self.cumulative - self.cumulative.max()))
        return weights / weights.sum()

    def update(self, payoffs: np.ndarray) -> None:
        self.cumulative += payoffs


class _RegretMatching:
    """Play in proportion to positive cumulative regret."""

    def __init__(self, size: int):
        self.regret = np.zeros(size)

    def strategy(self) -> np.ndarray:
        positive = np.clip(self.regret, 0.0, None)
        total = positive.sum()
        return positive / total if total > 0 else np.full(len(positive), 1.0 / len(positive))

    def update(self, payoffs: np.ndarray) -> None:
        self.regret += payoffs - self.strategy() @ payoffs


class _SwapRegret:
    """Blum-Mansour: one external learner per action, combined through a stationary distribution."""

    def __init__(self, copies: list):
        self.copies = copies
        self.current: np.ndarray | None = None

    def strategy(self) -> np.ndarray:
        rows = np.array([copy.strategy() for copy in self.copies])
        self.current = stationary_distribution(rows)
        return self.current

    def update(self, payoffs: np.ndarray) -> None:
        weights = self.current if self.current is not None else self.strategy()
        for weight, copy in zip(weights, self.copies):
            copy.update(weight * payoffs)
        self.current = None


def stationary_distribution(transition: np.ndarray) -> np.ndarray:
    """A distribution x with x = x Q for a row-stochastic matrix Q (least squares on
    (Q^T - I) x = 0, sum x = 1; any stationary distribution serves when Q is reducible)."""
    size = len(transition)
    system = np.vstack([transition.T - np.eye(size), np.ones((1, size))])
    rhs = np.zeros(size + 1)
    rhs[-1] = 1.0
    x, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    x = np.clip(x, 0.0, None)
    return x / x.sum()


def run_dynamics(game: NormalFormGame, rule: str, iterations: int = 10_000, *, swap: bool = False,
                 eta: float | None = None, dt: float = 0.01, start: Profile | None = None,
                 seed: int = 0, records: int = 500) -> Trajectory:
    """Run `rule` for `iterations` rounds (replicator: `iterations` steps of length `dt`).

    `start` is the initial mixed profile (FP: the prior belief, default uniform; replicator:
    default a seeded random interior point, since uniform is often a rest point; Hedge and
    regret matching start uniform). Only fictitious play (tie-breaking) and the replicator's
    default start draw random numbers, from `numpy.random.default_rng(seed)`."""
    if rule not in RULES:
        raise AnalysisInputError("dynamics", "rule", f"unknown rule {rule!r}; use one of {', '.join(RULES)}")
    if swap and rule not in ("hedge", "regret-matching"):
        raise AnalysisInputError(
            "dynamics", "swap", f"the swap-regret version exists for hedge and regret-matching, not {rule}"
        )
    if iterations < 1:
        raise AnalysisInputError("dynamics", "iterations", f"must be at least 1, got {iterations}")
    rng = np.random.default_rng(seed)
    if rule == "replicator":
        if start is None:
            start = _interior_start(game, rng)
        return _replicator(game, start, iterations, dt, records)
    if rule == "fictitious":
        return _fictitious_play(game, start or game.uniform_profile(), iterations, rng, records)
    learners = []
    for i, size in enumerate(game.shape):
        spread = float(np.ptp(game.payoffs[i])) or 1.0
        step = eta if eta is not None else np.sqrt(8.0 * np.log(size) / iterations) / spread

        def make(size=size, step=step):
            return _Hedge(size, step) if rule == "hedge" else _RegretMatching(size)

        learners.append(_SwapRegret([make() for _ in range(size)]) if swap else make())
    return _no_regret(game, rule, swap, learners, iterations, records)


def _interior_start(game: NormalFormGame, rng: np.random.Generator) -> Profile:
    """A seeded random interior profile, halfway between uniform and a Dirichlet draw; the same
    point for both players of a symmetric game, so the run stays on the symmetric
    (one-population) dynamics whose orbits the textbook pictures show."""
    draws = [0.5 / size + 0.5 * rng.dirichlet(np.ones(size)) for size in game.shape]
    if game.is_symmetric():
        draws[1] = draws[0]
    return tuple(draws)


def _record_points(iterations: int, records: int) -> set[int]:
    return set(np.unique(np.linspace(1, iterations, min(records, iterations)).round().astype(int)).tolist())


class _Recorder:
    """Accumulates the time-averaged joint distribution and records snapshots."""

    def __init__(self, game: NormalFormGame):
        self.game = game
        self.current: list[np.ndarray] = []
        self.joint_total = np.zeros(game.shape)
        self.marginal_total = [np.zeros(size) for size in game.shape]
        self.rows: list[tuple] = []

    def add(self, profile: Profile, weight: float = 1.0) -> None:
        self.current.append(np.concatenate(profile))
        self.joint_total += weight * product_distribution(profile)
        for total, strategy in zip(self.marginal_total, profile):
            total += weight * strategy

    def snapshot(self, step: float, profile: Profile) -> None:
        mass = self.joint_total.sum()
        joint = self.joint_total / mass
        averages = tuple(t / t.sum() for t in self.marginal_total)
        gaps = correlation_gaps(self.game, joint)
        self.rows.append((step, profile, averages, gaps.ce_gap, gaps.cce_gap, self.game.nash_conv(averages)))

    def trajectory(self, rule: str, swap: bool, step: float = 1.0) -> Trajectory:
        n = self.game.num_players
        steps = np.array([r[0] for r in self.rows], dtype=float)
        strategies = [np.array([r[1][i] for r in self.rows]) for i in range(n)]
        averages = [np.array([r[2][i] for r in self.rows]) for i in range(n)]
        cycle = detect_cycle(np.array(self.current), step=step)
        return Trajectory(rule, swap, steps, strategies, averages, np.array([r[3] for r in self.rows]),
                          np.array([r[4] for r in self.rows]), np.array([r[5] for r in self.rows]), cycle,
                          self.joint_total / self.joint_total.sum())


def _no_regret(game, rule, swap, learners, iterations, records) -> Trajectory:
    recorder = _Recorder(game)
    marks = _record_points(iterations, records)
    for t in range(1, iterations + 1):
        profile = tuple(learner.strategy() for learner in learners)
        recorder.add(profile)
        for i, learner in enumerate(learners):
            learner.update(game.deviation_payoffs(profile, i))
        if t in marks:
            recorder.snapshot(t, profile)
    return recorder.trajectory(rule, swap)


def _fictitious_play(game, prior, iterations, rng, records) -> Trajectory:
    """Simultaneous fictitious play; ties between best responses broken uniformly at random."""
    recorder = _Recorder(game)
    marks = _record_points(iterations, records)
    counts = [np.zeros(size) for size in game.shape]
    beliefs = tuple(prior)
    for t in range(1, iterations + 1):
        played = []
        for i in range(game.num_players):
            best = game.best_responses(beliefs, i, tol=1e-12)
            played.append(best[int(rng.integers(len(best)))] if len(best) > 1 else best[0])
        profile = game.pure_profile(played)
        for i, a in enumerate(played):
            counts[i][a] += 1
        beliefs = tuple(c / t for c in counts)
        recorder.add(profile)
        if t in marks:
            recorder.snapshot(t, profile)
    return recorder.trajectory("fictitious", False)


def _replicator(game, start, iterations, dt, records) -> Trajectory:
    """Integrate the multi-population replicator ODE and sample it every `dt`."""
    sizes = list(game.shape)
    bounds = np.cumsum([0] + sizes)

    def split(state):
        return tuple(state[bounds[i]:bounds[i + 1]] for i in range(len(sizes)))

    def velocity(_, state):
        profile = split(state)
        parts = []
        for i, x in enumerate(profile):
            payoffs = game.deviation_payoffs(profile, i)
            parts.append(x * (payoffs - x @ payoffs))
        return np.concatenate(parts)

    times = np.arange(iterations + 1) * dt
    solution = solve_ivp(velocity, (0.0, times[-1]), np.concatenate(start), t_eval=times,
                         method="DOP853", rtol=1e-10, atol=1e-12)
    if not solution.success:
        raise RuntimeError(f"replicator integration failed: {solution.message}")
    recorder = _Recorder(game)
    marks = _record_points(iterations, records)
    for t, state in enumerate(solution.y.T):
        profile = tuple(np.clip(p, 0.0, None) / np.clip(p, 0.0, None).sum() for p in split(state))
        recorder.add(profile, weight=0.5 if t in (0, iterations) else 1.0)
        if t in marks:
            recorder.snapshot(t * dt, profile)
    return recorder.trajectory("replicator", False, step=dt)


def plot_trajectory(
    game: NormalFormGame, trajectory: Trajectory, path: str | Path, stamp: dict | None = None
) -> Path:
    """Two panels: each player's current action probabilities over time, and the CE / CCE gaps
    and NashConv of the averages (log scale). Written as PNG with the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, player in enumerate(game.players):
        for a, action in enumerate(game.actions[i]):
            left.plot(trajectory.steps, trajectory.strategies[i][:, a], label=f"{player}: {action}",
                      linestyle=("-", "--", ":", "-.")[i % 4])
    left.set_xlabel("time" if trajectory.rule == "replicator" else "iteration")
    left.set_ylabel("probability (current strategy)")
    left.set_ylim(-0.02, 1.02)
    left.legend(fontsize=7, ncol=max(1, game.num_players))
    name = trajectory.rule + (" (swap)" if trajectory.swap else "")
    left.set_title(f"{name} on {game.name}; cycle: {trajectory.cycle.verdict}")
    floor = 1e-12
    right.semilogy(trajectory.steps, np.maximum(trajectory.cce_gap, floor), label="CCE gap of average play")
    right.semilogy(trajectory.steps, np.maximum(trajectory.ce_gap, floor), label="CE gap of average play")
    right.semilogy(
        trajectory.steps, np.maximum(trajectory.nash_conv, floor), label="NashConv of average strategies"
    )
    right.set_xlabel(left.get_xlabel())
    right.set_ylabel("payoff per round")
    right.legend(fontsize=8)
    right.set_title("convergence")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        figure.savefig(
            path,
            dpi=110,
            format="png",
            metadata={"sepo-run": json.dumps(stamp, sort_keys=True)} if stamp else None,
        )
    finally:
        plt.close(figure)
    return path
