"""What this machine can hold: the memory budget that solvers and play loops check their
estimated size against before they start, so that a command too large for the machine is one
line naming the options that would make it fit, not a process that grows until the kernel kills
it (and that no signal reaches while it is inside one huge allocation).
"""
from __future__ import annotations

import math
import os
import resource

from sepo.errors import SepoError

BUDGET_SHARE = 0.5
"""The share of the memory available when a command starts that one solve or one batch of
episodes may plan to hold (the rest: the interpreter, the model, other processes)."""


def available_memory() -> int:
    """Bytes available now: Linux's MemAvailable (else the physical memory), within the process's
    address-space limit (`ulimit -v`)."""
    available = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            available = 8 << 30
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft not in (resource.RLIM_INFINITY, -1) and soft > 0:
        available = min(available, soft)
    return available


def memory_budget() -> int:
    """Bytes one solve or one batch of episodes may plan to hold (`BUDGET_SHARE` of the available)."""
    return int(available_memory() * BUDGET_SHARE)


def count_text(n: int) -> str:
    """A count for a person: "21,845"; a power of ten past 10^15 (a 10,000-round tree has a count
    of thousands of digits, more than Python prints); "more than 10^300" from 10^300 on, where
    counts stop (`sepo.metrics.repeated.SATURATED`)."""
    if n >= 10**300:
        return "more than 10^300"
    return f"{n:,}" if n < 10**15 else f"about 10^{math.floor(math.log10(n))}"


def size_text(n_bytes: int | float) -> str:
    """A byte count for a person: "3.2 GB"; a power of ten past a petabyte ("10^16 bytes"). Like
    "3.2 GB" it is rounded without saying so: the messages around it say "about" once."""
    if n_bytes >= 10**15:
        return f"10^{math.floor(math.log10(n_bytes))} bytes"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{int(n_bytes)} B"


def refuse(what: str, need: float, fix: str | None = None, budget: int | None = None) -> None:
    """Raise the one-line refusal of a size: `what` would hold about `need` bytes, more than the
    `budget` (default `memory_budget()`) this machine can spare; then `fix`, what would fit."""
    budget = memory_budget() if budget is None else budget
    raise SepoError(
        f"{what} would hold about {size_text(need)}, more than the {size_text(budget)} this machine "
        "can spare" + (f"; {fix}" if fix else "")
    )


def check_fits(need: float, what: str, fix: str | None = None, budget: int | None = None) -> None:
    """`refuse` when `need` bytes exceed the `budget` (default `memory_budget()`); else nothing."""
    budget = memory_budget() if budget is None else budget
    if need > budget:
        refuse(what, need, fix, budget)


# -- the sizes of sepo's structures, estimated from the options before anything is built ----------------

ROLLOUT_BYTES = 2048
"""One sampled training rollout of the tabular trainer, besides its decisions: its group, opponent,
seat, draws, payoff and events, and the step's per-rollout rewards and advantages. Measured
(tracemalloc, 4,096 to 32,768 rollouts): 930 B a two-decision rollout."""
ROLLOUT_DECISION_BYTES = 256
"""One decision of a training rollout: its state, action and mask, its exploitation charge and
credit, and the step's temporaries over them. Measured: a 50-decision rollout 3.3 kB, a
10-decision one 0.8 kB (about 60 B a decision, and 4x that for the step's arithmetic)."""


def rollout_batch_bytes(rollouts: int, decisions: int) -> int:
    """A training step's `rollouts` sampled rollouts of at most `decisions` decisions each."""
    return rollouts * (ROLLOUT_BYTES + ROLLOUT_DECISION_BYTES * max(1, decisions))


TREE_NODE_BYTES = 384
"""One node of the repeated-game DP besides its children: its history row, the agent's
probabilities, the values, choices and gradient of the backward passes."""
TRAINING_NODE_BYTES = 1536
"""The same node in a training environment, which keeps its own children index and the forward
passes' reach and values."""


def tree_node_bytes(n_agent: int, n_opponent: int, training: bool = False) -> int:
    """One node of a repeated game's joint-history DP: the children index ([nA, nO] int64), and in
    training a second one; measured (tracemalloc) 2,110 B a node for 15 prices a side (the solve)
    and 4,070 B (one training step; 4,640 with Advantage Alignment's values)."""
    children = 8 * n_agent * n_opponent
    return 2 * children + TRAINING_NODE_BYTES if training else children + TREE_NODE_BYTES


GRID_POINT_BYTES = 256
"""One price of a grid: its float, its two-decimal name, and its entry in each decision's legal
actions and in a policy's row."""


def check_episodes(game, episodes: int, opponents: int, what: str, per_opponent: str = "--episodes") -> None:
    """Refuse, in one line with the largest `per_opponent` count that fits, a batch of `episodes`
    episodes against each of `opponents` opponents whose records (every decision with its
    observation, kept until the metrics are computed) would not fit in the memory budget."""
    per_episode = max(1, int(game.episode_bytes()))
    count = max(1, episodes) * max(1, opponents)
    budget = memory_budget()
    if per_episode * count <= budget:
        return
    fits = budget // (per_episode * max(1, opponents))
    shrink = game.episode_size_hint(budget // count)
    options = ([f"{per_opponent} {fits} or fewer"] if fits >= 1 else []) + ([shrink] if shrink else [])
    raise SepoError(
        f"{what} would hold about {size_text(per_episode * count)} of episode records ({episodes:,} "
        f"episode(s) x {opponents} opponent(s) x {size_text(per_episode)} each) and this machine can spare "
        f"{size_text(budget)}; " + (f"use {' or '.join(options)}" if options else "use a shorter game")
    )


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask: a container's or `taskset`'s
    share, not the machine's count), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


PARALLEL_REASON = (
    "each is a CPU-bound process or thread, so more than the cores only adds memory and contention "
    "(and slows every one of them)"
)


def check_parallelism(count: int, option: str, what: str) -> None:
    """Refuse, in one line, `count` parallel `what` (processes or threads) beyond this process's
    usable cores (`usable_cores`), and fewer than one."""
    if count < 1:
        raise SepoError(f"{option} must be >= 1, got {count}")
    cores = usable_cores()
    if count > cores:
        raise SepoError(
            f"{option} {count} is more {what} than the {cores} CPU core{'s' if cores != 1 else ''} this "
            f"process may use; {PARALLEL_REASON}: use {option} {cores} or fewer"
        )
