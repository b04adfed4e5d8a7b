"""Equilibrium computation speed: sepo's Nash enumeration vs nashpy, and the CE/CCE LP.

What it measures
----------------
1. All Nash equilibria of random two-player n x n games (standard normal payoffs, so
   non-degenerate with probability one), for each size in `--sizes`, on the same games:
   - sepo: `sepo.analysis.equilibria.nash_equilibria_2p` (support enumeration, every support
     pair of one size solved in one batched numpy call);
   - nashpy `Game.support_enumeration()` and `Game.vertex_enumeration()`.
   Before timing counts, each result is compared with nashpy's vertex enumeration (same set of
   equilibria to 1e-8); the script prints how many games agree, and how many games nashpy's
   support enumeration got wrong (it rejects -0.0 and -1e-17 probabilities of off-support
   actions, so it drops equilibria on some games). Reported: mean seconds per game for each
   method and the ratios nashpy time / sepo time (above 1: sepo is faster).
2. Correlated and coarse correlated equilibria by LP (`correlated_equilibrium`, HiGHS dual
   simplex plus sepo's polishing step): a 3-player, 4-action game (64 joint actions), then how
   time grows with the number of joint actions (players x actions from 2x2 up to 5x4). nashpy
   has no correlated equilibria, so there is no reference time; the largest incentive-constraint
   violation of every result is printed instead.

Timings are wall clock (`time.perf_counter`), each the best of `--repeats` runs over the same
games. Growth is summarised as the log-log slope of time against game size.

Run: `.venv/bin/python benchmarks/bench_equilibria.py [--sizes 2,3,4,5,6] [--games 10] [--seed 0]`
Absolute numbers depend on the machine; compare ratios measured in the same run.
"""
from __future__ import annotations

import argparse
import platform
import time
import warnings

import nashpy
import numpy as np

from sepo.analysis.equilibria import correlated_equilibrium, nash_equilibria_2p
from sepo.analysis.normal_form import NormalFormGame


def best_time(function, repeats: int) -> float:
    """Best wall-clock time of `repeats` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def same_set(ours, reference, tol: float = 1e-8) -> bool:
    def close(a, b):
        return max(np.abs(a[0] - b[0]).max(), np.abs(a[1] - b[1]).max()) <= tol
    return len(ours) == len(reference) and all(any(close(r, o) for o in ours) for r in reference)


def slope(sizes, times) -> float:
    """Log-log slope: time grows like size**slope."""
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def bench_enumeration(sizes, games_per_size: int, repeats: int, seed: int) -> None:
    print("\n== All Nash equilibria of random n x n games: sepo vs nashpy (seconds per game) ==")
    print(
        f"{'n':>3} {'games':>5} {'agree':>6} {'nashpy SE wrong':>15} {'sepo':>10} {'nashpy SE':>10} "
        f"{'nashpy VE':>10} {'SE/sepo':>8} {'VE/sepo':>8}"
    )
    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        games = [(rng.normal(size=(n, n)), rng.normal(size=(n, n))) for _ in range(games_per_size)]
        agree = support_wrong = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for row, column in games:
                ours = nash_equilibria_2p(NormalFormGame.from_bimatrix(row, column)).equilibria
                vertex = [tuple(map(np.asarray, e)) for e in nashpy.Game(row, column).vertex_enumeration()]
                support = [tuple(map(np.asarray, e)) for e in nashpy.Game(row, column).support_enumeration()]
                agree += same_set(ours, vertex) and same_set(vertex, ours)
                support_wrong += not same_set(support, vertex)
            sepo_time = best_time(
                lambda: [nash_equilibria_2p(NormalFormGame.from_bimatrix(r, c)) for r, c in games], repeats
            )
            se_time = best_time(
                lambda: [list(nashpy.Game(r, c).support_enumeration()) for r, c in games], repeats
            )
            ve_time = best_time(
                lambda: [list(nashpy.Game(r, c).vertex_enumeration()) for r, c in games], repeats
            )
        per = [t / games_per_size for t in (sepo_time, se_time, ve_time)]
        rows.append((n, *per))
        print(
            f"{n:>3} {games_per_size:>5} {agree:>6} {support_wrong:>15} {per[0]:>10.2e} {per[1]:>10.2e} "
            f"{per[2]:>10.2e} {per[1] / per[0]:>8.1f} {per[2] / per[0]:>8.1f}"
        )
    if len(rows) >= 2:
        ns = [r[0] for r in rows]
        print("growth with n (time ~ n^slope, fitted over the sizes above): "
              f"sepo {slope(ns, [r[1] for r in rows]):.1f}, nashpy SE {slope(ns, [r[2] for r in rows]):.1f}, "
              f"nashpy VE {slope(ns, [r[3] for r in rows]):.1f}")
        print("(support enumeration is exponential in n: sum_k C(n,k)^2 = C(2n,n) support pairs)")


def bench_correlated(repeats: int, seed: int) -> None:
    rng = np.random.default_rng(seed + 1)
    print("\n== Correlated equilibrium LP, 3 players x 4 actions (64 joint actions) ==")
    game = NormalFormGame.from_tensor(rng.normal(size=(3, 4, 4, 4)))
    for kind in ("ce", "cce"):
        for objective in ("max-welfare", "min-welfare"):
            result = correlated_equilibrium(game, kind, objective)
            seconds = best_time(lambda: correlated_equilibrium(game, kind, objective), repeats)
            print(
                f"{kind.upper():>4} {objective:<12} {seconds * 1e3:8.2f} ms   welfare "
                f"{result.objective_value:+.4f}   max violation {result.max_violation:.1e}"
            )
    print("\n== CE LP time against the number of joint actions ==")
    print(
        f"{'players':>7} {'actions':>7} {'joint':>6} {'CE constraints':>14} {'CE ms':>9} {'CCE ms':>9} "
        f"{'max violation':>13}"
    )
    shapes = [(2, 2), (2, 4), (3, 3), (3, 4), (4, 3), (3, 6), (4, 4), (5, 3), (5, 4)]
    joints, ce_times = [], []
    for players, actions in shapes:
        game = NormalFormGame.from_tensor(rng.normal(size=(players, *([actions] * players))))
        ce = best_time(lambda: correlated_equilibrium(game, "ce"), repeats)
        cce = best_time(lambda: correlated_equilibrium(game, "cce"), repeats)
        violation = max(correlated_equilibrium(game, k).max_violation for k in ("ce", "cce"))
        joint = actions ** players
        joints.append(joint)
        ce_times.append(ce)
        print(
            f"{players:>7} {actions:>7} {joint:>6} {players * actions * (actions - 1):>14} {ce * 1e3:>9.2f} "
            f"{cce * 1e3:>9.2f} {violation:>13.1e}"
        )
    print(f"growth: CE time ~ (joint actions)^{slope(joints, ce_times):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,3,4,5,6", help="n for the n x n games, comma-separated")
    parser.add_argument("--games", type=int, default=10, help="random games per size")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (best is reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, nashpy {nashpy.__version__}, "
        f"{platform.processor() or platform.machine()}"
    )
    bench_enumeration([int(s) for s in args.sizes.split(",")], args.games, args.repeats, args.seed)
    bench_correlated(args.repeats, args.seed)


if __name__ == "__main__":
    main()
