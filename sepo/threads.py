"""How many CPU threads torch uses in a `sepo` command.

`--threads N` sets them. Without it the command chooses when it loads a model (`settle`), from
how busy the machine is at that moment: on a shared machine every extra thread of a CPU-bound
torch process only adds contention (on two busy cores, two threads each made a model's replies
several times slower than one thread), while on an idle machine more threads are faster. The
choice is one progress line. `OMP_NUM_THREADS`, when set (a worker process, a user's export),
is kept as it is. Library use (no command) leaves torch's own default alone.

The thread count can change a CPU reduction's last bits, so replies kept in a reply cache are
keyed by it (`sepo.policies.batch_cache`); `--threads N` makes a rerun read the same ones.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

SAMPLE_SECONDS = 0.2
"""How long the machine's CPU use is watched before choosing."""

_COMMAND: dict = {}
"""The running command's setting: {"threads": N or None (choose), "said": whether the line is out}."""


@dataclass(frozen=True)
class Machine:
    """What the choice reads: the cores this process may use, the machine's cores (over which the
    load and the busy share are measured), the 1-minute load average, the share of the machine's
    CPU time in use just now (0 to 1), other `sepo` commands that used CPU just now, and torch's
    own default (its physical cores: hyper-threads add little to a matrix product), never exceeded."""

    cores: int
    machine_cores: int
    load: float | None
    busy: float | None
    other_sepo: int = 0
    torch_default: int | None = None


def choose_threads(machine: Machine) -> tuple[int, str]:
    """Threads for torch and why: the usable cores less those other work keeps busy (rounded to
    the nearest), at least one. Other work is the calmer of the load average (which lags: a
    command that just ended still counts for a minute) and the busy share just now, and at least
    one core for each other `sepo` command at work."""
    cores = max(1, machine.cores)
    load_share = None if machine.load is None else machine.load / max(1, machine.machine_cores)
    shares = [share for share in (load_share, machine.busy) if share is not None]
    busy_cores = min(min(shares, default=0.0), 1.0) * cores
    others = max(busy_cores, float(min(machine.other_sepo, cores)))
    threads = max(1, min(cores, machine.torch_default or cores, int(cores - others + 0.5)))
    seen = []
    if machine.load is not None:
        seen.append(f"load average {machine.load:.2f}")
    if machine.busy is not None:
        seen.append(f"{machine.busy:.0%} of the CPU busy just now")
    if machine.other_sepo:
        plural = "s" if machine.other_sepo != 1 else ""
        seen.append(f"{machine.other_sepo} other sepo command{plural} at work")
    where = f" ({', '.join(seen)})" if seen else ""
    why = (f"about {others:.1f} of the {cores} usable cores busy with other work{where}" if others >= 0.5
           else f"the {cores} usable core{'s are' if cores != 1 else ' is'} free{where}")
    if machine.torch_default and threads == machine.torch_default < int(cores - others + 0.5):
        why += f"; {threads} is torch's own default (its count of physical cores)"
    return threads, why


def configure(threads: int | None) -> None:
    """A command starts: `threads` given (`--threads`, checked), or None (chosen when a model loads)."""
    _COMMAND.clear()
    _COMMAND.update(threads=threads, said=False)
    if threads is not None:
        import torch

        _torch_default()
        torch.set_num_threads(threads)


def reset() -> None:
    """The command ended: library use after it leaves torch's threads alone again."""
    from sepo import progress

    _COMMAND.clear()
    progress.forget()


def settle() -> None:
    """Before a model computes: choose the thread count (unless given) and say it, once a command."""
    if not _COMMAND or _COMMAND["said"]:
        return
    _COMMAND["said"] = True
    import torch

    from sepo import progress

    if _COMMAND["threads"] is not None:
        progress.note(f"torch threads: {_COMMAND['threads']} (--threads)", keep=True)
        return
    if os.environ.get("OMP_NUM_THREADS"):
        given = os.environ["OMP_NUM_THREADS"]
        progress.note(f"torch threads: {torch.get_num_threads()} (OMP_NUM_THREADS={given})", keep=True)
        return
    threads, why = choose_threads(measure())
    torch.set_num_threads(threads)
    progress.note(f"torch threads: {threads}: {why}; --threads N sets them", keep=True)


def measure(seconds: float = SAMPLE_SECONDS) -> Machine:
    """This machine now (see `Machine`): CPU use watched for `seconds`."""
    from sepo.limits import usable_cores

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    before, sepo_before = _cpu_times(), _sepo_cpu()
    time.sleep(seconds)
    after, sepo_after = _cpu_times(), _sepo_cpu()
    busy = None
    if before is not None and after is not None and after[1] > before[1]:
        busy = 1.0 - (after[0] - before[0]) / (after[1] - before[1])
    at_work = sum(1 for pid, used in sepo_after.items() if used > sepo_before.get(pid, used))
    cores = usable_cores()
    return Machine(cores, max(cores, os.cpu_count() or cores), load, busy, at_work, _torch_default())


_DEFAULT: list[int] = []


def _torch_default() -> int:
    """torch's thread count before sepo first set it in this process."""
    if not _DEFAULT:
        import torch

        _DEFAULT.append(torch.get_num_threads())
    return _DEFAULT[0]


def _cpu_times() -> tuple[int, int] | None:
    """(idle, total) jiffies of the whole machine (/proc/stat), None where it cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return fields[3] + fields[4], sum(fields)


def _is_sepo(argv: list[str]) -> bool:
    """A `sepo` command line: the `sepo` script (run directly or by Python), or `python -m sepo...`."""
    head = [os.path.basename(arg) for arg in argv[:2]]
    return "sepo" in head or any(a == "-m" and b.startswith("sepo") for a, b in zip(argv, argv[1:3]))


def _sepo_cpu() -> dict[int, int]:
    """CPU jiffies used so far by every other `sepo` command on the machine (Linux; empty elsewhere)."""
    found = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = cmdline.read(4096).decode(errors="replace").split("\0")
            if not _is_sepo(argv):
                continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            found[pid] = int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, ValueError, IndexError):
            continue
    return found
