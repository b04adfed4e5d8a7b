"""Exact auction best response: the vectorised DP vs the naive recursive reference, and growth.

What it measures
----------------
1. The adversarial gap of one agent per case, computed by `AuctionSolver` (sepo's vectorised DP
   over the public bid tree, `sepo/games/auction/exact.py`) and by `naive_best_response`
   (`sepo/games/auction/reference.py`: plain recursion over public histories, the agent's whole
   value history carried as particles, every decision built by replaying the real game) on the
   same game and agent, for 1..`--naive-rounds` rounds. Agents: a random tabular policy over
   memory-1 keys (every public history is reached: the DP's worst case) and the paper's
   AdaptiveBid. The two values must agree to 1e-9; the script prints the times and the ratio
   naive / DP (above 1: the DP is faster).
2. How the DP's time grows with the number of rounds (2..`--max-rounds`) for the random memory-1
   agent on the paper's rules (2 bidders, values 2/4, bids 1/2/3): seconds for `evaluate` (gap
   and best-response payoff) and for `gradient`, the number of public histories in the last
   round, and the growth factor per extra round (the tree grows 12x per round).

Timings are wall clock (`time.perf_counter`), best of `--repeats`.
Run: `.venv/bin/python benchmarks/bench_auction.py [--naive-rounds 3] [--max-rounds 6] [--repeats 3]`
Absolute numbers depend on the machine; compare ratios measured in the same run.
"""
from __future__ import annotations

import argparse

import numpy as np

from sepo.games.auction.bots import AdaptiveBid
from sepo.games.auction.exact import AuctionSolver
from sepo.games.auction.reference import naive_best_response
from sepo.games.auction.rules import make_game
from sepo.metrics.exact import action_table
from sepo.policies.tabular import TabularPolicy

from timing import best_of, machine_line


def random_agent(solver, seed=0):
    decisions = solver.decisions()
    table = np.random.default_rng(seed).dirichlet(np.ones(solver.k), size=len(decisions))
    return TabularPolicy(table, [d.info_key for d in decisions], name="random-memory-1")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--naive-rounds", type=int, default=3)
    parser.add_argument("--max-rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine_line())

    print("\n1. DP vs naive recursive reference (paper rules, rigorous payoffs, memory 1)")
    print(f"{'rounds':>6} {'agent':>16} {'gap':>10} {'DP s':>10} {'naive s':>10} {'naive/DP':>9}")
    for rounds in range(1, args.naive_rounds + 1):
        game = make_game("rigorous", rounds=rounds, memory=1)
        for label in ("random-memory-1", "AdaptiveBid"):
            def dp():
                solver = AuctionSolver(game)  # a fresh solver: no cached solve
                agent = random_agent(solver) if label != "AdaptiveBid" else AdaptiveBid()
                return solver.gap(action_table(agent, solver.decisions()))
            solver = AuctionSolver(game)
            agent = random_agent(solver) if label != "AdaptiveBid" else AdaptiveBid()
            t_dp, gap = best_of(args.repeats, dp)
            t_naive, reference = best_of(1, lambda: naive_best_response(game, agent))
            assert abs(gap - reference) < 1e-9, (gap, reference)
            print(
                f"{rounds:>6} {label:>16} {gap:>10.6f} {t_dp:>10.4f} {t_naive:>10.4f} {t_naive / t_dp:>9.1f}"
            )

    print("\n2. DP growth with rounds (random memory-1 agent, paper rules)")
    print(f"{'rounds':>6} {'histories':>10} {'evaluate s':>11} {'gradient s':>11} {'x per round':>12}")
    previous = None
    for rounds in range(2, args.max_rounds + 1):
        game = make_game("rigorous", rounds=rounds, memory=1)
        solver = AuctionSolver(game)
        table = action_table(random_agent(solver), solver.decisions())

        def evaluate():
            solver._cache.clear()
            return solver.evaluate(table)

        def gradient():
            solver._cache.clear()
            return solver.gradient(table)
        t_eval, _ = best_of(args.repeats, evaluate)
        t_grad, _ = best_of(args.repeats, gradient)
        histories = len(solver.out) ** (rounds - 1)
        growth = "" if previous is None else f"{t_eval / previous:.1f}"
        print(f"{rounds:>6} {histories:>10} {t_eval:>11.4f} {t_grad:>11.4f} {growth:>12}")
        previous = t_eval


if __name__ == "__main__":
    main()
