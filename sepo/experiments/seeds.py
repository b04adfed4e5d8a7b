"""Held-out selection's seeds: validation episodes never share a seed with the reported test episodes.

Test episodes are played with `eval_seed`, validation episodes with `eval_seed + 1`; the
episode seeds each split actually uses (`sepo.evaluation.evaluate.episode_seed`, for every pool
and opponent of the domain) are computed and compared before any cell runs.
"""
from __future__ import annotations

from sepo.errors import SepoError

SPLITS = ("validation", "test")


def split_seed(eval_seed: int, split: str) -> int:
    if split not in SPLITS:
        raise SepoError(f"unknown split {split!r}; use validation or test")
    return eval_seed + (1 if split == "validation" else 0)


def episode_seeds(game, protocol: str, seed: int, episodes: int) -> set[int]:
    """Every episode seed an audit of `game` under `protocol` with `seed` plays."""
    from sepo.evaluation.evaluate import episode_seed
    from sepo.opponents.pools import BEST_RESPONSE, default_pools

    seeds = set()
    for pool, specs in default_pools(game.name, protocol, game).items():
        pool_key = "" if protocol == "paper" else pool
        for spec in specs:
            label = BEST_RESPONSE if spec.name == BEST_RESPONSE else spec.label
            seeds.update(episode_seed(protocol, seed, label, ep, pool_key) for ep in range(episodes))
    return seeds


def check_disjoint(config) -> None:
    """Refuse a config whose validation and test episodes would share a seed in any domain."""
    from sepo.games import get_domain

    counts = [config.episodes, *(a.episodes for a in config.agents if a.episodes is not None)]
    most_validation, most_test = max(c.validation for c in counts), max(c.test for c in counts)
    for domain in config.domains:
        game = get_domain(domain.name).game(config.protocol, **domain.params)
        validation = episode_seeds(
            game, config.protocol, split_seed(config.eval_seed, "validation"), most_validation
        )
        test = episode_seeds(game, config.protocol, split_seed(config.eval_seed, "test"), most_test)
        shared = validation & test
        if shared:
            raise SepoError(
                f"episodes: validation and test episodes of {domain.name} share {len(shared)} seeds "
                f"(e.g. {min(shared)}); fewer episodes or another eval_seed"
            )
