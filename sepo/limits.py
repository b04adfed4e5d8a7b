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
    of thousands of digits, more than Python prints)."""
    return f"{n:,}" if n < 10**15 else f"about 10^{math.floor(math.log10(n))}"


def size_text(n_bytes: int | float) -> str:
    """A byte count for a person: "3.2 GB"; a power of ten past a petabyte ("10^16 bytes")."""
    if n_bytes >= 10**15:
        return f"10^{math.floor(math.log10(n_bytes))} bytes"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{int(n_bytes)} B"


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
    options = ([f"{per_opponent} {fits:,} or fewer"] if fits >= 1 else []) + ([shrink] if shrink else [])
    raise SepoError(f"{what} would hold about {size_text(per_episode * count)} of episode records ({episodes:,} episode(s) x "
                    f"{opponents} opponent(s) x {size_text(per_episode)} each) and this machine can spare "
                    f"{size_text(budget)}; " + (f"use {' or '.join(options)}" if options else "use a shorter game"))


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask: a container's or `taskset`'s
    share, not the machine's count), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


PARALLEL_REASON = ("each is a CPU-bound process or thread, so more than the cores only adds memory and contention "
                   "(and slows every one of them)")


def check_parallelism(count: int, option: str, what: str) -> None:
    """Refuse, in one line, `count` parallel `what` (processes or threads) beyond this process's
    usable cores (`usable_cores`), and fewer than one."""
    if count < 1:
        raise SepoError(f"{option} must be >= 1, got {count}")
    cores = usable_cores()
    if count > cores:
        raise SepoError(f"{option} {count:,} is more {what} than the {cores} CPU core{'s' if cores != 1 else ''} this "
                        f"process may use; {PARALLEL_REASON}: use {option} {cores} or fewer")
