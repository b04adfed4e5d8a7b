"""IPD performance: matches per second against axelrod.Match, the exact DP, batched LLM scoring.

What it measures
----------------
1. Episodes per second on the same pairs of strategies, 8 rounds, paper payoffs:
   - sepo, vectorised: `sepo.games.ipd.rollouts.play_matches` plays `--episodes` matches of a pair
     at once (one numpy step per round; the path the tabular trainer uses);
   - sepo, generic loop: `sepo.evaluation.play.play_episodes` (Decision objects, one policy call per
     decision; the path evaluation uses), on `--loop-episodes` matches;
   - the reference, `axelrod.Match(players, turns=8).play()`, one fresh Match per episode (a reused
     Match would serve deterministic pairs from its cache), on `--axelrod-episodes` matches.
   Ratios vectorised / Axelrod and loop / Axelrod, per pair and overall.
2. The exact DP (`sepo.metrics.repeated`) for tabular agents: a random memory-2 table on the
   (round, last 2 rounds) states, and a random full-history table on the whole joint-history tree,
   at 8, 10 and 12 rounds (the full tree to `--full-max-rounds`, default 10): seconds for the full solve (gap,
   best-response payoff, both maximisers, Danskin gradient) and for the gap alone, the number of states, and
   the growth per 2 rounds. Reference in the same run: OpenSpiel's Python best response on
   `pyspiel.create_repeated_game` (turn-based) for the 8-round memory-2 agent, whose value must agree.
3. Batched scoring of a language model's whole IPD history tree (`--llm-rounds`, default 5: 341
   prompts): the tiny local model (built in a temporary directory, random weights) in score mode,
   every prompt's two answers scored after the state's reason, as prompts per second, in batches
   of `--batch` against batch size 1 on the first `--single` prompts.

Timings are wall clock (`time.perf_counter`), best of `--repeats`.
Run: `.venv/bin/python benchmarks/bench_ipd.py [--episodes 20000] [--skip-llm]`
Absolute numbers depend on the machine; compare ratios measured in the same run.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.ipd.bots import BOTS
from sepo.games.ipd.exact import IPDSolver
from sepo.games.ipd.rollouts import play_matches
from sepo.metrics.repeated import gap_value, solve

from timing import best_of, machine_line, openspiel_br_value

PAIRS = [
    ("TFT", "AlwaysDefect", "TitForTat", "Defector"),
    ("GrimTrigger", "AlternatingDefect", "Grudger", "CyclerDC"),
    ("TFT", "GrimTrigger", "TitForTat", "Grudger"),
    ("AlwaysCooperate", "TFT", "Cooperator", "TitForTat"),
]


def matches(args):
    import axelrod as axl

    game = load_game("ipd")
    print(f"\n1. Episodes per second, {game.rounds} rounds (sepo vectorised: {args.episodes}, sepo loop: "
          f"{args.loop_episodes}, axelrod.Match: {args.axelrod_episodes} per pair)")
    print(f"{'pair':>28} {'vectorised/s':>13} {'loop/s':>9} {'axelrod/s':>10} {'vec/axl':>8} {'loop/axl':>9}")
    totals = np.zeros(3)
    for ours_a, ours_b, theirs_a, theirs_b in PAIRS:
        uniforms = np.random.default_rng(0).random((args.episodes, game.rounds, 2))
        t_vec, played = best_of(
            args.repeats,
            lambda: play_matches(
                BOTS[ours_a](),
                [BOTS[ours_b]()],
                np.zeros(args.episodes, int),
                game.rounds,
                game.payoffs.matrix,
                uniforms,
            ),
        )
        seeds = list(range(args.loop_episodes))
        t_loop, episodes = best_of(
            args.repeats,
            lambda: play_episodes(game, BOTS[ours_a](), [BOTS[ours_b]() for _ in seeds], seeds, agent_seed=0),
        )

        def reference():
            first, second = getattr(axl, theirs_a)(), getattr(axl, theirs_b)()
            for _ in range(args.axelrod_episodes):
                match = axl.Match((first, second), turns=game.rounds)
                match.play()
            return match.final_score()
        t_axl, score = best_of(args.repeats, reference)
        assert tuple(played.payoff[0].sum(0)) == score, (played.payoff[0].sum(0), score)
        assert (episodes[0].agent_payoffs.sum(), episodes[0].opponent_payoffs.sum()) == score
        rates = np.array([args.episodes / t_vec, args.loop_episodes / t_loop, args.axelrod_episodes / t_axl])
        totals += [1 / rates[0], 1 / rates[1], 1 / rates[2]]
        print(f"{ours_a + ' v ' + ours_b:>28} {rates[0]:>13.0f} {rates[1]:>9.0f} {rates[2]:>10.0f} "
              f"{rates[0] / rates[2]:>8.0f} {rates[1] / rates[2]:>9.2f}")
    overall = len(PAIRS) / totals
    print(f"{'all pairs (harmonic)':>28} {overall[0]:>13.0f} {overall[1]:>9.0f} {overall[2]:>10.0f} "
          f"{overall[0] / overall[2]:>8.0f} {overall[1] / overall[2]:>9.2f}")


def dp(args):
    print("\n2. Exact DP for tabular agents (seconds, best of %d)" % args.repeats)
    print(
        f"{'agent':>14} {'rounds':>6} {'states':>9} {'solve s':>10} {'gap only s':>11} "
        f"{'x per 2 rounds':>15} {'gap':>9}"
    )
    for memory in (2, None):
        previous = None
        for rounds in (8, 10, 12) if memory else range(8, args.full_max_rounds + 1, 2):
            game = load_game("ipd", rounds=rounds, memory=memory)
            solver = IPDSolver(game)
            table = np.random.default_rng(0).dirichlet([1, 1], size=len(solver.keys))
            tree = solver.tree(table)
            t_solve, result = best_of(args.repeats, lambda: solve(tree))
            t_gap, _ = best_of(args.repeats, lambda: gap_value(tree))
            growth = "" if previous is None else f"{t_solve / previous:.1f}"
            label = "memory-2" if memory else "full history"
            print(
                f"{label:>14} {rounds:>6} {tree.num_states:>9} {t_solve:>10.5f} {t_gap:>11.5f} {growth:>15} "
                f"{result.gap:>9.5f}"
            )
            previous = t_solve
            if memory and rounds == 8:
                reference = (solver, table, t_solve, result)

    solver, table, t_ours, result = reference
    t_os, value = best_of(1, lambda: openspiel_br_value(solver, table))
    assert abs(value - result.br_payoff) < 1e-9, (value, result.br_payoff)
    print(
        f"OpenSpiel Python best response, same 8-round memory-2 agent: {t_os:.3f} s (value {value:.6f} = "
        f"ours); ratio OpenSpiel / sepo solve: {t_os / t_ours:.0f}"
    )



def llm(args):
    from sepo.metrics.exact import action_table
    from sepo.models.tiny import init_tiny_model
    from sepo.policies.hf import HFDecoding, HFPolicy

    game = load_game("ipd", rounds=args.llm_rounds)
    solver = IPDSolver(game)
    decisions = solver.decisions()
    with tempfile.TemporaryDirectory() as workdir:
        path = init_tiny_model(Path(workdir) / "tiny", seed=0)
        scoring = HFDecoding(score_prefix=game.text.reason)
        policy = HFPolicy(str(path), game.text, mode="score", decoding=scoring, batch_size=args.batch)
        policy.batch_action_probabilities(decisions[:8])  # warm up
        t_batched, table = best_of(args.repeats, lambda: action_table(policy, decisions))
        single = HFPolicy(policy.model, game.text, mode="score", tokenizer=policy.tokenizer, decoding=scoring,
                          batch_size=1)
        subset = decisions[: args.single]
        t_single, table_single = best_of(1, lambda: action_table(single, subset))
        assert np.allclose(table[: len(subset)], table_single, atol=1e-4)
        result = solver.evaluate(table)
    rate, rate_single = len(decisions) / t_batched, len(subset) / t_single
    print(
        f"\n3. Batched scoring of the tiny model's whole {args.llm_rounds}-round history tree: "
        f"{len(decisions)} prompts in {t_batched:.2f} s = {rate:.0f} prompts/s (batch {args.batch}); batch "
        f"1: {rate_single:.0f} prompts/s; ratio {rate / rate_single:.1f}; its exact gap {result.value:.4f} "
        "per round"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=20000)
    parser.add_argument("--loop-episodes", type=int, default=500)
    parser.add_argument("--axelrod-episodes", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llm-rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--single", type=int, default=40)
    parser.add_argument(
        "--full-max-rounds",
        type=int,
        default=10,
        help="largest full-history tree (12 rounds: 5.6M states in the last round, several GB)",
    )
    parser.add_argument("--skip-llm", action="store_true")
    args = parser.parse_args()
    print(machine_line())
    matches(args)
    dp(args)
    if not args.skip_llm:
        llm(args)


if __name__ == "__main__":
    main()
