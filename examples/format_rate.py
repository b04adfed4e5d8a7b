"""The invalid-reply rate of a language model in each domain: how often a reply does not parse.

For each game: play episodes of the domain's `paper` demonstration mixture (a game without one: its
first mixture) against its train pool (the best-response entry left out) with a seed of its own,
keep the distinct prompts the mixture met, draw `--states` of them, and sample `--replies` replies
to each from the model under the rigorous protocol's decoding at `--temperature` (default 1).
Every reply is parsed strictly as in play (`sepo.policies.replies.parse_reply`: a reply cut off at
`--max-new-tokens` is `truncated`). Printed per game: invalid replies / replies, the rate with its
95% Wilson interval (replies of one prompt are not independent, so the interval is a guide, not a
guarantee), the failure kinds, the mean reply length in tokens and the wall time.

With `--exact` (models SFT'd to answer with the action line alone, `--temperature` > 0) nothing
is sampled: at every distinct prompt met, the probability that the reply is a legal action's
answer line and the end of the turn within `--max-new-tokens` is computed exactly
(`HFPolicy.answer_probabilities`); one minus it bounds the invalid-reply probability there from
above. Printed per game: the bound's mean over the prompts met, its median and maximum, and how
many prompts exceed 2%. `--json` is rewritten whole after every game.

It measures the format only: which action the model picks is `sepo eval`'s business. It exists
because a `sepo eval` audit also estimates the played policy at every state it meets (thousands of
replies), which is far more than a format check needs on two CPU cores.

Run: `.venv/bin/python examples/format_rate.py --model runs/smollm2 --games kuhn ipd
--max-new-tokens kuhn=48,ipd=64 --json runs/format.json`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from sepo.errors import SepoError, one_line
from sepo.evaluation.injection import wilson
from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.registry import get_domain
from sepo.inputs import read_text
from sepo.opponents.pools import BEST_RESPONSE, default_pools
from sepo.policies.base import Policy
from sepo.policies.hf import HFDecoding, HFPolicy
from sepo.policies.replies import decoding_for, parse_reply
from sepo.training.checkpoint import atomic_write_text

GAMES = ("kuhn", "ipd", "auction", "negotiation", "negotiation-gt", "pricing", "openspiel:leduc_poker")


class _Recorder(Policy):
    """Plays `strategy` and keeps every decision it was asked."""

    def __init__(self, strategy: Policy, sink: list):
        self.strategy, self.sink, self.name = strategy, sink, strategy.name

    def action_probabilities(self, decision):
        return self.strategy.action_probabilities(decision)

    def act(self, decisions, rng):
        self.sink.extend(decisions)
        return self.strategy.act(decisions, rng)

    def reset(self):
        self.strategy.reset()


def met_decisions(game, episodes: int, seed: int) -> list:
    """Distinct decisions (by prompt) the domain's default mixture (`paper` where it has one, else
    its first) meets against the train pool."""
    domain = get_domain(game.name)
    strategies, weights = zip(*domain.demos()[domain.default_mixture()])
    weights = np.array(weights) / sum(weights)
    pool = [
        spec for spec in default_pools(game.name, "rigorous", game)["train"] if spec.name != BEST_RESPONSE
    ]
    seen: dict = {}
    for k, spec in enumerate(pool):
        for episode in range(episodes):
            rng = np.random.default_rng([seed, k, episode])
            sink: list = []
            strategy = strategies[int(rng.choice(len(strategies), p=weights))]()
            play_episodes(game, _Recorder(strategy, sink), [spec.build(game)], [int(rng.integers(2**31))],
                          agent_seed=int(rng.integers(2**31)), agent_player=episode % game.num_players)
            for decision in sink:
                seen.setdefault((game.text.system_prompt(), game.text.user_prompt(decision)), decision)
    return list(seen.values())


def measure(
    model, game_name: str, states: int, replies: int, max_new_tokens: int, temperature: float, seed: int
) -> dict:
    game = load_game(game_name)
    pool = met_decisions(game, episodes=8, seed=seed)
    rng = np.random.default_rng(seed)
    chosen = [pool[i] for i in sorted(rng.choice(len(pool), size=min(states, len(pool)), replace=False))]
    decoding = decoding_for("rigorous", temperature=temperature, max_new_tokens=max_new_tokens)
    policy = HFPolicy(model, game.text, mode="sample", decoding=HFDecoding.of(decoding, seed=seed))
    start = time.perf_counter()
    groups = policy.replies(chosen, replies, seed=seed)
    seconds = time.perf_counter() - start
    kinds = Counter(parse_reply(game.text, r, d).status for d, group in zip(chosen, groups) for r in group)
    n = sum(kinds.values())
    invalid = n - kinds.get("ok", 0)
    lengths = [r.completion_tokens for group in groups for r in group]
    return {
        "game": game_name,
        "states": len(chosen),
        "states_met": len(pool),
        "replies": n,
        "invalid": invalid,
        "rate": invalid / n,
        "ci95": wilson(invalid, n),
        "kinds": dict(kinds),
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "mean_reply_tokens": float(np.mean(lengths)),
        "seconds": seconds,
        "example": groups[0][0].text,
    }


def measure_exact(model, game_name: str, max_new_tokens: int, temperature: float, seed: int) -> dict:
    """At every distinct prompt met (not a sample of them), the exact probability that the reply
    is a legal action's answer line followed by the end of the turn within `max_new_tokens`
    (`answer_probabilities`). One minus it bounds the invalid-reply probability there from above:
    every such reply parses, and some other replies may parse too. Exact, no sampling; meant for
    models SFT'd to answer with the action line alone."""
    game = load_game(game_name)
    pool = met_decisions(game, episodes=8, seed=seed)
    decoding = decoding_for("rigorous", temperature=temperature, max_new_tokens=max_new_tokens)
    policy = HFPolicy(model, game.text, mode="sample", decoding=HFDecoding.of(decoding, seed=seed))
    start = time.perf_counter()
    _, rest = policy.answer_probabilities(pool)
    seconds = time.perf_counter() - start
    return {
        "game": game_name,
        "states": len(pool),
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "mean_rest": float(rest.mean()),
        "max_rest": float(rest.max()),
        "median_rest": float(np.median(rest)),
        "states_rest_over_2pct": int((rest > 0.02).sum()),
        "seconds": seconds,
    }


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit status 2, as sepo's own commands give them."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def _limits(text: str, games: list[str]) -> dict[str, int]:
    """`--max-new-tokens`: one number for every game, or GAME=N pairs (a game not named: 48); a
    pair naming a game not measured (a typo) is refused rather than silently ignored."""
    def number(value: str, where: str) -> int:
        try:
            limit = int(value)
        except ValueError:
            raise SepoError(
                f"--max-new-tokens: {where} must be a whole number of tokens, got {value!r}"
            ) from None
        if limit < 1:
            raise SepoError(f"--max-new-tokens: {where} must be >= 1, got {limit}")
        return limit

    if "=" not in text:
        return dict.fromkeys(games, number(text.strip(), "the limit"))
    pairs = {}
    for pair in filter(str.strip, text.split(",")):
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise SepoError(
                f"--max-new-tokens: {pair.strip()!r} is not GAME=N (give one number, or GAME=N pairs "
                "separated by commas)"
            )
        if name not in games:
            raise SepoError(
                f"--max-new-tokens names {name!r}, which is not among the games measured ({', '.join(games)})"
            )
        pairs[name] = number(value, name)
    return {name: pairs.get(name, 48) for name in games}


def _check_json(path: str) -> None:
    """`--json` is a new file or one this script wrote (a results object): never a folder, never
    someone else's file (it is replaced after every game)."""
    target = Path(path)
    if target.is_dir():
        raise SepoError(f"--json {path} is a folder; name a .json file")
    if not target.exists():
        return
    try:
        data = json.loads(read_text(target, "--json file"))
    except (SepoError, ValueError):
        data = None
    if not (isinstance(data, dict) and set(data) == {"model", "seed", "results"}):
        raise SepoError(
            f"--json {path} exists and was not written by this script; not touching it (name another file)"
        )


def _check(args) -> None:
    """Every argument, before anything is measured (a bad one late in the list would otherwise
    stop the run after the first games' minutes of work)."""
    for name, low in (("states", 1), ("replies", 1), ("threads", 1), ("seed", 0)):
        if getattr(args, name) < low:
            raise SepoError(f"--{name} must be >= {low}, got {getattr(args, name)}")
    if args.exact and args.temperature <= 0:
        raise SepoError(
            "--exact bounds the invalid rate of sampled replies (--temperature > 0); at --temperature 0 "
            "each prompt has one greedy reply: measure it without --exact"
        )
    args.limits = _limits(args.max_new_tokens, args.games)
    for name in args.games:
        load_game(name)
        if get_domain(name).default_mixture() is None:
            raise SepoError(f"game {name!r} has no demonstration mixture to meet prompts with")
        decoding_for("rigorous", temperature=args.temperature, max_new_tokens=args.limits[name])
    if args.json:
        _check_json(args.json)


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--games", nargs="+", default=list(GAMES))
    parser.add_argument("--states", type=int, default=50, help="distinct prompts per game")
    parser.add_argument("--replies", type=int, default=4, help="replies per prompt")
    parser.add_argument(
        "--max-new-tokens",
        default="48",
        help="one number, or GAME=N pairs, comma-separated (a game not named: 48)",
    )
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--exact",
        action="store_true",
        help="bound the invalid rate exactly at every prompt met instead of sampling replies (answer-only "
             "models)",
    )
    parser.add_argument(
        "--json", help="also write the results to this file (a new file, or one this script wrote)"
    )
    args = parser.parse_args(argv)
    try:
        _check(args)
        _run(args)
    except SepoError as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        raise SystemExit(2) from None


def _run(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    results = []
    for name in args.games:
        limit = args.limits[name]
        if args.exact:
            result = measure_exact(args.model, name, limit, args.temperature, args.seed)
            results.append(result)
            print(
                f"{name}: invalid probability <= {result['mean_rest']:.3%} on average over the "
                f"{result['states']} prompts met (median {result['median_rest']:.3%}, max "
                f"{result['max_rest']:.3%}, {result['states_rest_over_2pct']} prompts over 2%; max {limit} "
                f"new tokens; exact, {result['seconds']:.0f} s)",
                flush=True,
            )
        else:
            result = measure(args.model, name, args.states, args.replies, limit, args.temperature, args.seed)
            results.append(result)
            low, high = result["ci95"]
            print(
                f"{name}: {result['invalid']}/{result['replies']} invalid = {result['rate']:.1%} [{low:.1%}, "
                f"{high:.1%}] kinds {result['kinds']} ({result['states']} prompts of {result['states_met']} "
                f"met, max {limit} new tokens, mean reply {result['mean_reply_tokens']:.1f} tokens, "
                f"{result['seconds']:.0f} s)",
                flush=True,
            )
        if args.json:  # replaced whole after every game: a stop or a failed write never leaves a torn file
            atomic_write_text(
                args.json, json.dumps({"model": args.model, "seed": args.seed, "results": results}, indent=1)
            )


if __name__ == "__main__":
    main()
