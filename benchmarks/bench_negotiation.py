"""Split-bargaining performance: the exact DP over the joint-demand tree, its growth with rounds.

What it measures
----------------
1. The exact DP (`sepo.metrics.repeated`, through `sepo.games.negotiation.exact`) for a random
   full-history tabular agent (demands 1-9 over 10: 81 joint demands a round) at 1 to
   `--full-max-rounds` rounds (default 4, the paper's; 538,084 agent histories): seconds to build
   the agent's tree from its table, for the full solve (gap, best-response payoff, both maximisers,
   Danskin gradient) and for the gap alone, the number of DP states, and the growth factor per round.
   The same for a random memory-1 table (82 keys) at 4, 8, 16 and 32 rounds.
2. Reference, in the same run: OpenSpiel's Python `BestResponsePolicy` on
   `pyspiel.create_repeated_game` (9x9 stage game, turn-based, recall = rounds) for the same
   full-history agent at 1 to `--openspiel-max-rounds` rounds (default 2: at 3 rounds its tree has
   43 million nodes); its best-response value must equal ours; the ratio OpenSpiel / sepo per round
   count. Plus brute force over every deterministic opponent plan for a deterministic agent (Concede)
   at 2 rounds (81 plans played through the rules), against the DP on the same agent.
3. Reading an agent: the generic path `action_table(bot, solver.decisions())` at every canonical
   decision of the full 4-round tree (building 538,084 Decision objects, then one batched call),
   against the memory-1 default (82 decisions).

Timings are wall clock (`time.perf_counter`), best of `--repeats`.
Absolute numbers depend on the machine; compare ratios measured in the same run. Run:

    .venv/bin/python benchmarks/bench_negotiation.py [--full-max-rounds 4] [--openspiel-max-rounds 2] \\
        [--skip-reading]
"""
from __future__ import annotations

import argparse
import functools
import itertools

import numpy as np

from sepo.games import load_game
from sepo.games.negotiation.bots import BOTS
from sepo.games.negotiation.exact import NegotiationSolver
from sepo.metrics.exact import action_table
from sepo.metrics.repeated import gap_value, solve

from timing import best_of, machine_line, openspiel_br_value


def dp(args):
    print(f"\n1. Exact DP for a random tabular agent (seconds, best of {args.repeats})")
    print(
        f"{'agent':>13} {'rounds':>6} {'DP states':>10} {'tree s':>9} {'solve s':>9} {'gap only s':>11} "
        f"{'x per round':>12} {'gap':>8}"
    )
    reference = {}
    for memory, rounds_list in (("full", range(1, args.full_max_rounds + 1)), (1, (4, 8, 16, 32))):
        previous = None
        for rounds in rounds_list:
            solver = NegotiationSolver(load_game("negotiation", rounds=rounds, memory=memory))
            table = np.random.default_rng(rounds).dirichlet(np.ones(9), size=len(solver.keys))
            t_tree, tree = best_of(args.repeats, lambda: solver.tree(table))
            t_solve, result = best_of(args.repeats, functools.partial(solve, tree))
            t_gap, _ = best_of(args.repeats, functools.partial(gap_value, tree))
            total = t_tree + t_solve
            growth = "" if previous is None else f"{total / previous:.1f}"
            label = "full history" if memory == "full" else "memory-1"
            print(
                f"{label:>13} {rounds:>6} {tree.num_states:>10} {t_tree:>9.4f} {t_solve:>9.4f} "
                f"{t_gap:>11.4f} {growth:>12} {result.gap:>8.4f}"
            )
            previous = total
            if memory == "full" and rounds <= args.openspiel_max_rounds:
                reference[rounds] = (solver, table, total, result)
            del tree
    return reference


def openspiel(args, reference):
    print("\n2. Reference: OpenSpiel's Python best response on the same full-history agents")
    for rounds, (solver, table, t_ours, result) in sorted(reference.items()):
        t_os, value = best_of(1, lambda: openspiel_br_value(solver, table))
        assert abs(value - result.br_payoff) < 1e-9, (value, result.br_payoff)
        print(
            f"  {rounds} round(s): OpenSpiel {t_os:.3f} s, sepo (tree + solve) {t_ours:.5f} s, best-response "
            f"value {value:.6f} in both; ratio OpenSpiel / sepo: {t_os / t_ours:.0f}"
        )
    game = load_game("negotiation", rounds=2, memory="full")
    solver = NegotiationSolver(game)
    table = action_table(BOTS["Concede"](), solver.decisions())
    t_dp, result = best_of(args.repeats, lambda: solver.evaluate(table))
    t_bf, (gap, br) = best_of(1, lambda: brute_force(game, BOTS["Concede"]()))
    assert abs(gap - result.value) < 1e-12 and abs(br - result.br_payoff) < 1e-12
    print(
        f"  brute force over every deterministic opponent plan against Concede, 2 rounds: {t_bf:.3f} s vs "
        f"the DP {t_dp:.4f} s (ratio {t_bf / t_dp:.0f}); gap {gap:g}, best-response payoff {br:g} in both"
    )


def brute_force(game, agent):
    """Every opponent plan (round-1 demand, round-2 demand after the agent's round-1 demand) played through
    the rules."""
    first = agent.action_probabilities(game.new_initial_state().decision(0))
    support = [a for a, p in first.items() if p > 0]
    best_gap = best_br = -np.inf
    for o1 in range(game.num_demands):
        for reply in itertools.product(range(game.num_demands), repeat=len(support)):
            gap = br = 0.0
            for a1, o2 in zip(support, reply):
                state = game.new_initial_state()
                state.apply_actions((a1, o1))
                for a2, p2 in agent.action_probabilities(state.decision(0)).items():
                    if p2:
                        child = state.clone()
                        child.apply_actions((a2, o2))
                        mine, theirs = child.returns()
                        gap += first[a1] * p2 * (theirs - mine) / game.rounds
                        br += first[a1] * p2 * theirs / game.rounds
            best_gap, best_br = max(best_gap, gap), max(best_br, br)
    return best_gap, best_br



def reading(args):
    print(
        "\n3. Reading a scripted agent's table through the generic path (action_table at solver.decisions())"
    )
    for memory in (1, "full"):
        solver = NegotiationSolver(load_game("negotiation", memory=memory))
        t_decisions, decisions = best_of(1, solver.decisions)
        t_read, table = best_of(1, lambda: action_table(BOTS["Concede"](), decisions))
        t_solve, result = best_of(1, lambda: solver.evaluate(table))
        print(
            f"  memory {memory}: {len(decisions)} decisions built in {t_decisions:.3f} s, read in "
            f"{t_read:.3f} s, solved in {t_solve:.3f} s; Concede's gap {result.value:g}, best-response "
            f"payoff {result.br_payoff:g}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full-max-rounds", type=int, default=4)
    parser.add_argument("--openspiel-max-rounds", type=int, default=2)
    parser.add_argument("--skip-reading", action="store_true")
    args = parser.parse_args()
    print(machine_line())
    reference = dp(args)
    openspiel(args, reference)
    if not args.skip_reading:
        reading(args)


if __name__ == "__main__":
    main()
