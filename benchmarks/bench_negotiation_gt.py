"""The three-item negotiation's best-response DP: its cost, against brute force, and its growth.

Measures (process CPU time):
1. the DP over the opponent's observations (`sepo.games.negotiation_gt.exact.DPSearch`) against the
   reference, brute-force enumeration of every deterministic opponent strategy (the test's
   `_brute_force`), on the same problems (a fixed pool, fixed opponent values, 2 rounds), for each
   paper bot; prints both values (equal) and the time ratio;
2. the DP's growth with the number of rounds (2..6) for TFTNeg (memory 1) and GreedyNeg (memory 0)
   on a fixed 2,3,4 pool: states and seconds;
3. the full paper setting (64 pools, 36 value vectors per player, 4 rounds) for every paper bot.

Run: `.venv/bin/python benchmarks/bench_negotiation_gt.py [--skip-full]`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sepo.games import load_game  # noqa: E402
from sepo.games.negotiation_gt.bots import BOTS  # noqa: E402
from sepo.games.negotiation_gt.exact import DPSearch  # noqa: E402
from tests.games.negotiation_gt.test_exact import _brute_force  # noqa: E402


def dp(game, bot):
    start = time.process_time()
    search = DPSearch(game, bot.memory, bot.reads)
    search.expand(bot)
    value = search.solve()["gap"]
    states = sum(len(level) for tree in search.trees.values() for level in tree.levels)
    return value, states, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-full", action="store_true")
    args = parser.parse_args()
    print("1. DP vs brute-force enumeration (pool 1,2,2; opponent values 2,3,5; 2 rounds)")
    for name in ("FairNeg", "TFTNeg", "ConcedeNeg", "HardballNeg", "GreedyNeg"):
        game = load_game("negotiation-gt", rounds=2, items="1,2,2", opponent_values="2,3,5")
        value, states, seconds = dp(game, BOTS[name]())
        start = time.process_time()
        reference = _brute_force(game, BOTS[name]())
        brute = time.process_time() - start
        print(
            f"  {name:12s} dp {value:.6f} ({seconds * 1e3:.1f} ms)  brute force {reference:.6f} "
            f"({brute * 1e3:.1f} ms)  speed-up x{brute / max(seconds, 1e-9):.1f}"
        )
    print("2. growth with the number of rounds (pool 2,3,4)")
    for name in ("TFTNeg", "GreedyNeg"):
        for rounds in range(2, 7):
            game = load_game("negotiation-gt", rounds=rounds, items="2,3,4")
            value, states, seconds = dp(game, BOTS[name]())
            print(f"  {name:10s} rounds {rounds}: gap {value:.4f}, {states:,} states, {seconds:.2f} s")
    if not args.skip_full:
        print("3. the paper setting (64 pools, 4 rounds)")
        game = load_game("negotiation-gt")
        for name in ("FairNeg", "TFTNeg", "ConcedeNeg", "HardballNeg", "GreedyNeg"):
            value, states, seconds = dp(game, BOTS[name]())
            print(f"  {name:12s} gap {value:.4f}, {states:,} states, {seconds:.1f} s")


if __name__ == "__main__":
    main()
