"""Exact exploitability throughput in an OpenSpiel game: sepo's batched solver vs OpenSpiel's.

What it measures
----------------
Evaluations per second of *exact* exploitability (NashConv / 2) of N random tabular policies of
a two-player zero-sum OpenSpiel game (default `leduc_poker`, 936 information states), each a table
that plays both seats, computed on the *same* policies in the same process:

1. sepo, batched: `OpenSpielSolver.values(tables)` on the whole `[N, rows, width]` batch (one
   sparse product and one pass over the information states per seat, in blocks of `BLOCK`).
   Also timed one policy per call, to separate batching from the method, and by batch size
   (`--sizes`).
2. OpenSpiel C++: `pyspiel.exploitability(game, policy)` per policy on a prebuilt
   `pyspiel.TabularPolicy`; the call alone is timed (building the C++ policies from the tables is
   reported separately: a user holding numpy tables pays it too).
3. OpenSpiel Python: `open_spiel.python.algorithms.exploitability.exploitability` on the first
   `--python` policies (slow; for reference).

Before timing, every result is compared (they must agree to 1e-9). Times are process CPU time
(`time.process_time`, single-threaded BLAS: `OMP_NUM_THREADS=1`) by default, steadier than wall
time on a shared machine; `--clock wall` for wall time. The machine's load average is printed,
since the absolute numbers depend on it; the ratio of two paths measured in one run is the point
(the batched path aims for >= 10x over pyspiel's C++ at batches of >= 100 policies).

Run: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_openspiel.py [--game leduc_poker] [--n 200]`
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pyspiel
from open_spiel.python.algorithms import exploitability as os_exploitability

from sepo.games import load_game
from sepo.games.openspiel.exact import OpenSpielSolver, to_pyspiel_policy

from timing import machine_line


def random_tables(solver: OpenSpielSolver, n: int, seed: int) -> np.ndarray:
    """`n` random tables: Dirichlet rows over the legal moves, a mix of concentrations."""
    rng = np.random.default_rng(seed)
    legal = solver.tree.legal
    concentration = rng.choice([0.3, 1.0, 3.0], size=(n, 1, 1))
    gammas = rng.gamma(np.broadcast_to(concentration, (n,) + legal.shape)) * legal
    return gammas / gammas.sum(-1, keepdims=True)


def cpp_policy(solver: OpenSpielSolver, table: np.ndarray):
    return pyspiel.TabularPolicy(
        {
            key: [(int(a), float(table[r, c])) for c, a in enumerate(solver.tree.actions[r])]
            for r, key in enumerate(solver.keys)
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="leduc_poker")
    parser.add_argument("--n", type=int, default=200, help="policies (the batch)")
    parser.add_argument(
        "--python", type=int, default=3, help="policies also timed with OpenSpiel's Python exploitability"
    )
    parser.add_argument("--single", type=int, default=20, help="policies timed one per call through sepo")
    parser.add_argument("--sizes", default="1,10,100,1000", help="batch sizes of sepo's throughput sweep")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    game = load_game(f"openspiel:{args.game}")
    start = clock()
    solver = OpenSpielSolver(game)
    build = clock() - start
    tables = random_tables(solver, args.n, args.seed)
    print(
        f"{machine_line()}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; clock "
        f"{args.clock}"
    )
    print(
        f"game {args.game}: {len(solver.keys)} information states, {len(solver.tree.node_kind):,} histories; "
        f"sepo's tree built in {build:.2f} s (once per process)"
    )

    start = clock()
    policies = [cpp_policy(solver, t) for t in tables]
    convert = clock() - start

    batched = []
    for _ in range(3):
        start = clock()
        ours = solver.values(tables)
        batched.append(clock() - start)
    start = clock()
    singles = [solver.values(t)[0] for t in tables[: args.single]]
    single = (clock() - start) / len(singles)

    start = clock()
    theirs = np.array([pyspiel.exploitability(game.pyspiel_game, p) for p in policies])
    cpp = (clock() - start) / args.n

    start = clock()
    python = [
        os_exploitability.exploitability(game.pyspiel_game, to_pyspiel_policy(solver, t))
        for t in tables[: args.python]
    ]
    py = (clock() - start) / max(len(python), 1)

    gap = max(np.abs(ours - theirs).max(), np.abs(np.array(singles) - ours[: args.single]).max(),
              np.abs(np.array(python) - ours[: args.python]).max() if python else 0.0)
    assert gap < 1e-9, f"results differ by {gap}"
    per_batch = min(batched) / args.n
    print(f"all {args.n} results agree: max |difference| {gap:.1e}")
    print(f"{'path':<44}{'s / policy':>12}{'policies / s':>14}")
    for label, seconds in (
        (f"sepo batched ({args.n} at once)", per_batch),
        ("sepo one policy per call", single),
        ("pyspiel.exploitability (C++), per policy", cpp),
        (f"OpenSpiel Python exploitability ({len(python)})", py),
    ):
        print(f"{label:<44}{seconds:>12.2e}{1 / seconds:>14,.0f}")
    print(
        f"(building the {args.n} C++ policies from the tables: {convert / args.n:.2e} s each, not in the C++ "
        "row)"
    )
    print(
        f"ratio sepo batched / pyspiel C++: {cpp / per_batch:,.0f}x; sepo one per call / C++: "
        f"{cpp / single:,.1f}x; sepo batched / OpenSpiel Python: {py / per_batch:,.0f}x"
    )
    print("sepo by batch size (best of 3), against the C++ row above:")
    for size in (int(x) for x in args.sizes.split(",")):
        batch = random_tables(solver, size, args.seed + 1)
        times = []
        for _ in range(3):
            start = clock()
            solver.values(batch)
            times.append(clock() - start)
        each = min(times) / size
        print(
            f"  batch {size:>6,}: {each:.2e} s / policy, {1 / each:>10,.0f} policies / s, "
            f"{cpp / each:>8,.0f}x the C++"
        )


if __name__ == "__main__":
    main()
