"""`sepo experiment run`: expand a config into cells, run them on a backend, keep one results table.

The output folder is a `sepo.runs` run folder (command `experiment run`, config = the validated
experiment config): a new folder starts fresh, the same config resumes, any other config is
refused with one line. Finished cells (their `result.json` exists) are never redone; a cell that
was running when the runner was killed is run again (see `execute.run_cell`). After every
finished cell `results.parquet` is rebuilt from all finished cells and replaced atomically, so a
kill at any moment leaves a table that a resumed run completes to the uninterrupted run's.

Backends: `local` (a process pool of `workers` processes; they die with the runner) and `ray`
(each cell a Ray task with the CPUs/GPUs its agent needs, on a local instance or on a cluster
named by `address`). On a cluster the output folder must be one every node mounts at the same
path. A cell lost with its node or its worker process (not a failure of its own) is run again,
up to `RETRIES` times, and the runner says so (`on_notice`); the new attempt waits until the
lost one can no longer write (it holds the cell folder's lock until its process is gone),
finds the cell finished if the lost attempt got that far, and otherwise redoes or resumes it as
after a kill -9.
"""
from __future__ import annotations

import io
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Sequence

from sepo.errors import SepoError
from sepo.experiments.cells import Cell, Plan, expand
from sepo.experiments.config import ExperimentConfig, load_config, validate_config
from sepo.experiments.execute import RESULT, prepare, read_result, run_cell, wait_for_cell
from sepo.experiments.seeds import check_disjoint
from sepo.limits import check_parallelism
from sepo.runs import normalized, open_run

COMMAND = "experiment run"
RESULTS = "results.parquet"
BACKENDS = ("local", "ray")
VERSIONED = ("sepo", "numpy", "scipy", "open-spiel", "torch", "transformers", "trl", "peft", "pyarrow")

COLUMNS = (
    ("cell", "string"),
    ("domain", "string"),
    ("agent", "string"),
    ("agent_kind", "string"),
    ("stage", "string"),
    ("seed", "int64"),
    ("lambda_e", "float64"),
    ("lambda_c", "float64"),
    ("lambda_x", "float64"),
    ("checkpoint", "string"),
    ("split", "string"),
    ("chosen_by_validation", "bool_"),
    ("chosen_by_test", "bool_"),
    ("metric", "string"),
    ("value", "float64"),
    ("low", "float64"),
    ("high", "float64"),
    ("exact", "bool_"),
    ("protocol", "string"),
    ("config_hash", "string"),
    ("versions", "string"),
)


def package_versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def results_rows(config: ExperimentConfig, plan: Plan, out: Path) -> list[dict]:
    """The results table's rows from every finished cell, in plan order."""
    versions = json.dumps(package_versions(), sort_keys=True)
    digest = config.hash()
    rows = []
    for cell in plan.cells:
        path = out / "cells" / cell.id / RESULT
        if not path.exists():
            continue
        result = read_result(path)
        lam = cell.lambdas or (None, None, None)
        for row in result["rows"]:
            rows.append(
                {
                    "cell": cell.id,
                    "domain": cell.domain,
                    "agent": cell.agent,
                    "agent_kind": result["agent_kind"],
                    "stage": cell.stage,
                    "seed": cell.seed,
                    "lambda_e": lam[0],
                    "lambda_c": lam[1],
                    "lambda_x": lam[2],
                    **row,
                    "protocol": config.protocol,
                    "config_hash": digest,
                    "versions": versions,
                }
            )
    return rows


def results_table(config: ExperimentConfig, plan: Plan, out: Path) -> bytes:
    """The results table of every finished cell, as Parquet bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = results_rows(config, plan, out)
    schema = pa.schema(
        [(name, getattr(pa, kind)() if kind != "string" else pa.string()) for name, kind in COLUMNS]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    table = table.replace_schema_metadata({"config_hash": config.hash(), "cells": str(len(plan.cells))})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def write_results(config: ExperimentConfig, plan: Plan, out: Path, run) -> None:
    run.write_bytes(RESULTS, results_table(config, plan, out))


def _results_problem(path: Path) -> tuple[str | None, object]:
    """(what is wrong with the results table at `path`, or None; the table when it reads)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return f"{path.parent} holds no {RESULTS}", None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError):
        return f"{path} is not a readable Parquet file (damaged?)", None
    missing = [name for name, _ in COLUMNS if name not in table.column_names]
    if missing:
        return f"{path} is not an experiment's results table (no column {', '.join(missing[:3])})", None
    return None, table


def read_results(out: str | Path):
    """The results table of an experiment folder as a pyarrow Table; a damaged one is one line naming it."""
    path = Path(out) / RESULTS
    problem, table = _results_problem(path)
    if problem and not path.is_file():
        raise SepoError(f"{problem}; run `sepo experiment run CONFIG --out {out}` first")
    if problem:
        raise SepoError(
            f"{problem}; the same `sepo experiment run CONFIG --out {out}` rebuilds it from the cells' "
            "results"
        )
    return table


def check_finished(config: ExperimentConfig, plan: Plan, out: Path, run) -> str | None:
    """A finished experiment given again: check every cell's result (a damaged one is one line naming it)
    and rebuild a results table found damaged or missing from them; returns what was wrong with the table,
    or None, so that a rerun never points at a results file that cannot be read. A table the run never
    wrote is not its to rebuild (a folder left so by hand): left as it is."""
    for cell in plan.cells:
        if (out / "cells" / cell.id / RESULT).exists():
            read_result(out / "cells" / cell.id / RESULT)
    problem, _ = _results_problem(out / RESULTS)
    if problem is None or not run.owns(RESULTS):
        return None
    run.repair(RESULTS, results_table(config, plan, out))
    return problem


# ----------------------------------------------------------------------------------- backends

_IN_CELL = False
"""Whether this pool worker is running a cell (what SIGTERM interrupts) or waiting for one."""


def _worker_stop(signum, frame) -> None:
    """SIGTERM in a pool worker (the stopped runner's): a running cell unwinds as after Ctrl-C (its
    temporaries removed, the resources it holds released: killed outright, it left a semaphore
    for the resource tracker to warn about); an idle worker just exits."""
    if _IN_CELL:
        raise KeyboardInterrupt
    os._exit(130)


def _worker_init(threads: int) -> None:
    """A pool worker dies with the runner (Linux: parent-death signal), stops on SIGTERM
    (`_worker_stop`), and uses `threads` CPU threads."""
    import signal

    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("MKL_NUM_THREADS", str(threads))
    signal.signal(signal.SIGTERM, _worker_stop)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_cell_task(config_data: dict, cell: Cell, out: str) -> str:
    global _IN_CELL
    _IN_CELL = True
    try:
        run_cell(validate_config(config_data), cell, Path(out))
    finally:
        _IN_CELL = False
    return cell.id


def _run_cell_on_node(config_data: dict, cell: Cell, out: str) -> str:
    """A cell as a Ray task, on whichever node runs it: the experiment folder must be there (a
    filesystem every node mounts at the same path); an earlier attempt of the cell lost with its
    node may still be writing its folder, so this one waits until it cannot, and does not run a
    cell that attempt finished."""
    folder = Path(out)
    if not (folder / "plan.json").is_file():
        raise SepoError(f"the experiment folder {out} is not on the cluster node {socket.gethostname()} that "
                        f"was to run cell {cell.id}: --out must be a folder every node mounts at the same "
                        "path (a shared filesystem)")
    work = folder / "cells" / cell.id
    wait_for_cell(work)
    if (work / RESULT).is_file():
        return cell.id
    return _run_cell_task(config_data, cell, out)


STOP_SECONDS = 20.0
"""How long a stopped runner's cells may take to unwind before they are killed."""


class LocalBackend:
    """A process pool of `workers` processes on this machine."""

    def __init__(self, workers: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # one torch thread a worker: cells run side by side, and a machine's other work shares the cores
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_worker_init, initargs=(1,))
        self.capacity = workers

    def submit(self, config_data, cell, out):
        return self.pool.submit(_run_cell_task, config_data, cell, out)

    def wait(self, futures):
        from concurrent.futures import FIRST_COMPLETED, wait

        done, _ = wait(futures, return_when=FIRST_COMPLETED)
        for future in done:
            future.result()  # a cell's error is raised
        return [(future, None) for future in done]  # a local cell is never lost and retried

    def close(self, abort: bool = False):
        """Wait for the running cells; with `abort` (the runner was stopped) end them first: a SIGTERM
        reaches only the runner, whose pool would otherwise wait minutes for its cells to finish.
        A cell ended mid-way resumes as after a kill -9."""
        if abort:
            processes = [
                p for p in list((getattr(self.pool, "_processes", None) or {}).values()) if p.is_alive()
            ]
            # The pool's manager thread settles the running futures once their workers are gone; the
            # first shutdown forgets it, so it is joined here, not by the shutdown below.
            manager = getattr(self.pool, "_executor_manager_thread", None)
            # a worker whose cell unwound then exits, not waits for work
            self.pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.terminate()  # the cell unwinds (`_worker_stop`)
            deadline = time.monotonic() + STOP_SECONDS
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
                if process.is_alive():
                    process.kill()
            if manager is not None:
                manager.join(STOP_SECONDS)
        self.pool.shutdown(wait=True, cancel_futures=True)


RETRIES = 3
"""How many more times a cell lost with its node or worker process is run (its own error is not retried)."""
WAIT_SECONDS = 30.0
"""How often a Ray runner waiting for cells checks that the cluster still has a node that can run them."""


def check_address(address: str) -> str:
    """A Ray address the runner can use: `auto`, or `host:port` (optionally `ray://host:port`) whose
    port answers now. Ray itself retries an address that does not answer for minutes."""
    address = address.strip()
    if address == "auto":
        return address
    match = re.fullmatch(r"(ray://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", address)
    if not match or not 0 < int(match.group(3)) < 65536:
        raise SepoError(f"--address {address[:200]!r} is not a Ray address: give the head node's host:port "
                        "(what `ray start --head` prints), ray://host:port, or auto")
    host, port = match.group(2).strip("[]"), int(match.group(3))
    try:
        socket.create_connection((host, port), timeout=10).close()
    except OSError as error:
        raise SepoError(f"no Ray cluster answers at {address} ({error.strerror or error}): start its head "
                        "with `ray start --head`, or check the address") from None
    return address


def _lost(ray, error: BaseException) -> str | None:
    """Why a Ray task was lost without failing itself (its node or worker process died, its result
    went with its node, or Ray's memory monitor killed it), in words; None for any other error."""
    e = ray.exceptions
    where = re.search(r"Node IP: ([^,\s]+), node ID: ([0-9a-f]{8})", str(error))
    node = f" ({where.group(1)}, node {where.group(2)})" if where else ""
    if isinstance(error, (e.NodeDiedError, e.LocalRayletDiedError)):
        return f"the cluster node running it died{node}"
    if isinstance(error, e.OutOfMemoryError):
        return f"Ray's memory monitor killed it, its node being short of memory{node}"
    if isinstance(error, e.WorkerCrashedError):
        return f"the Ray worker process running it died{node}"
    if isinstance(error, e.ObjectLostError):
        return f"its result was lost with its node{node}"
    return None


class RayBackend:
    """Cells as Ray tasks: tabular and audit-only cells ask for one CPU, language-model cells for
    one GPU where the config trains on one. Connects to the cluster at `address` (or
    RAY_ADDRESS), or starts a local instance. Ray does not retry a task itself: the runner does,
    and says so (`lost`)."""

    def __init__(self, config: ExperimentConfig, workers: int, address: str | None = None,
                 notice: Callable[[str], None] = lambda line: None):
        try:
            import ray
        except ImportError:
            raise SepoError("--backend ray needs Ray: pip install 'sepo[ray]'") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            try:
                ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            except (ConnectionError, ray.exceptions.RayError) as error:
                line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                where = address or "a local instance"
                raise SepoError(f"cannot join the Ray cluster at {where}: {line[:300]}") from None
            self.started = True
        self.config = config
        self.notice = notice
        self.capacity = max(1, int(ray.cluster_resources().get("CPU", workers)))
        self.remote = ray.remote(max_retries=0, retry_exceptions=False)(_run_cell_on_node)
        self.needs: dict = {}
        self.starved = False

    def submit(self, config_data, cell, out):
        agent = next(a for a in self.config.agents if a.name == cell.agent)
        gpu = agent.kind == "hf" and (self.config.training.llm.gpu or self.config.sft.gpu)
        future = self.remote.options(num_cpus=1, num_gpus=1 if gpu else 0).remote(config_data, cell, out)
        self.needs[future] = "GPU" if gpu else "CPU"
        return future

    def _check_starved(self, futures) -> None:
        """Say once when no live node offers what a waiting cell needs (every such node died):
        the cells wait for one to join."""
        resources = self.ray.cluster_resources()
        offered = {k for k, v in resources.items() if v >= 1}
        wanted = sorted({self.needs.get(f, "CPU") for f in futures} - offered)
        if wanted and not self.starved:
            self.notice(f"no live node of the cluster offers a {' or '.join(wanted)}: {len(futures)} cell(s) "
                        "wait for one to join (`ray status` lists the nodes); Ctrl-C stops, the same command "
                        "resumes")
        self.starved = bool(wanted)

    def wait(self, futures):
        """[(future, why it was lost or None)] for the finished tasks; a cell's own error is raised
        (a SepoError as itself, so that it stays one line)."""
        while True:
            done, _ = self.ray.wait(list(futures), num_returns=1, timeout=WAIT_SECONDS)
            if done:
                break
            self._check_starved(futures)
        out = []
        for future in done:
            self.needs.pop(future, None)
            try:
                self.ray.get(future)
            except self.ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, SepoError):
                    raise error.cause from None
                raise
            except self.ray.exceptions.RayError as error:
                why = _lost(self.ray, error)
                if why is None:
                    raise
                out.append((future, why))
                continue
            out.append((future, None))
        return out

    def close(self, abort: bool = False):
        """With `abort` (the runner was stopped) end the running cells (each resumes as after a kill
        -9); leave a Ray this backend started."""
        if abort:
            for future in list(self.needs):
                try:
                    self.ray.cancel(future, force=True)
                except Exception:  # already finished or gone with its node
                    pass
        self.needs.clear()
        if self.started:
            self.ray.shutdown()


# ------------------------------------------------------------------------------------- runner

@dataclass
class Progress:
    done: int
    running: int
    left: int
    total: int
    elapsed: float
    eta: float | None


def seed_major(config, plan) -> Callable:
    """The order cells start in: unseeded cells (a base audit) first, then every stage at the
    first seed, then at the second, ...; the plan's order within one seed. A seed's rank is its
    place in its own agent's seeds (an agent with seeds of its own starts at its first with the
    others at theirs). An experiment stopped part-way (2-core budgets) then holds each method at
    its first seeds, not every seed of the first method."""
    rank = {
        agent.name: {seed: k for k, seed in enumerate(agent.seeds or config.seeds)} for agent in config.agents
    }
    index = {c.id: k for k, c in enumerate(plan.cells)}
    return lambda cell: (-1 if cell.seed is None else rank[cell.agent][cell.seed], index[cell.id])


def run_experiment(config_path: str | Path, out: str | Path, *, backend: str = "local", workers: int = 1,
                   overwrite: bool = False, on_progress: Callable[[Progress], None] | None = None,
                   stop_after: int | None = None, address: str | None = None,
                   on_notice: Callable[[str], None] | None = None,
                   only: Sequence[str] | None = None, amend: bool = False) -> dict:
    """Run (or resume) every cell of the config in `out`; returns a summary.
    `only` names the domains whose cells run this time (the rest stay pending for a later run).
    `amend` lets an experiment started under another config go on under this one where no finished
    cell's definition changes (`sepo.experiments.amend`).
    `address` names a Ray cluster (default: RAY_ADDRESS; only with the ray backend); `on_notice`
    hears what a user should know while it runs (a cell lost with its node and run again).
    `stop_after` ends after that many newly finished cells (tests of resumption)."""
    if backend not in BACKENDS:
        raise SepoError(f"unknown --backend {backend!r}; use {' or '.join(BACKENDS)}")
    if amend and overwrite:
        raise SepoError("--amend keeps an experiment's finished cells and --overwrite removes them: give one")
    if address is not None and backend != "ray":
        raise SepoError("--address names a Ray cluster: use it with --backend ray")
    if backend == "ray":
        address = address or os.environ.get("RAY_ADDRESS") or None
    if not address:  # a cluster's CPUs are the cluster's to count
        check_parallelism(workers, "--workers", "cells at once")
    else:
        address = check_address(address)
    notices: list[str] = []

    def notice(line: str) -> None:
        notices.append(line)
        if on_notice is not None:
            on_notice(line)

    config, text = load_config(config_path)
    check_disjoint(config)
    plan = expand(config)
    if not plan.cells:
        reasons = "; ".join(sorted({s["reason"] for s in plan.skipped}))
        raise SepoError(f"{config_path}: the experiment matrix has no runnable cells ({reasons})")
    selected = select_domains(config, only)
    config_data = config.record()
    out = Path(out)
    started = time.time()
    amendment: dict = {}

    def accept(saved: dict) -> None:
        from sepo.experiments.amend import check_and_prepare

        amendment.update(check_and_prepare(out, saved, normalized(config_data), plan))

    with open_run(out, COMMAND, config_data, overwrite=overwrite, amend=accept if amend else None) as run:
        if run.finished:  # read, never rerun or rewritten (a damaged results table is rebuilt from the cells)
            return {
                "cells": len(plan.cells),
                "finished": len(plan.cells),
                "already_finished": len(plan.cells),
                "ran": 0,
                "skipped": plan.skipped,
                "seconds": time.time() - started,
                "results": str(out / RESULTS),
                "config_hash": config.hash(),
                "repaired": check_finished(config, plan, out, run),
            }
        if amendment:
            record_amendment(run, amendment)
            notice(f"amended the config ({amendment['changes']}): {len(amendment['kept'])} finished cells "
                   f"kept, {len(amendment['restarted'])} unfinished cells start over")
        run.write_text("experiment.yaml", text)
        run.write_json(
            "plan.json",
            {
                "config_hash": config.hash(),
                "cells": [c.record() for c in plan.cells],
                "skipped": plan.skipped,
                "command": f"sepo experiment run {config_path} --out {out}",
            },
        )
        run.path("cells").mkdir(exist_ok=True)
        run.path("models")
        run.path(RESULTS)
        run.commit()
        prepare(config, run)
        finished = {c.id for c in plan.cells if (out / "cells" / c.id / RESULT).exists()}
        already = len(finished)
        pending = sorted((c for c in plan.cells if c.id not in finished and c.domain in selected),
                         key=seed_major(config, plan))
        not_selected = sum(1 for c in plan.cells if c.id not in finished and c.domain not in selected)
        durations: list[float] = []
        engine = None
        if pending:
            engine = (LocalBackend(workers) if backend == "local"
                      else RayBackend(config, workers, address, notice))
        running: dict = {}
        attempts: dict[str, int] = {}
        new = 0

        def report():
            if on_progress is not None:
                mean = sum(durations) / len(durations) if durations else None
                left = len(pending)
                eta = (
                    None
                    if mean is None
                    else mean * (left + len(running)) / max(1, engine.capacity if engine else 1)
                )
                on_progress(
                    Progress(len(finished), len(running), left, len(plan.cells), time.time() - started, eta)
                )

        report()
        try:
            while pending or running:
                ready = [c for c in pending if all(n in finished for n in c.needs)]
                while ready and len(running) < engine.capacity:
                    cell = ready.pop(0)
                    pending.remove(cell)
                    running[engine.submit(config_data, cell, str(out))] = (cell, time.time())
                report()
                if not running:
                    missing = sorted({n for c in pending for n in c.needs} - finished)
                    raise SepoError(
                        f"cells wait for cells that are not in the plan: {', '.join(missing[:3])}"
                    )
                for future, lost in engine.wait(list(running)):
                    cell, t0 = running.pop(future)
                    if lost is not None:
                        attempts[cell.id] = attempts.get(cell.id, 1) + 1
                        if attempts[cell.id] > 1 + RETRIES:
                            raise SepoError(f"cell {cell.id} was lost {1 + RETRIES} times, the last because "
                                            f"{lost}; the finished cells are kept, and the same command "
                                            "resumes the rest")
                        notice(f"cell {cell.id}: {lost}; running it again (attempt {attempts[cell.id]} of "
                               f"{1 + RETRIES}), on a live node, from what the lost attempt left")
                        pending.insert(0, cell)
                        continue
                    durations.append(time.time() - t0)
                    finished.add(cell.id)
                    write_results(config, plan, out, run)
                    new += 1
                report()
                if stop_after is not None and new >= stop_after:
                    break
        except BaseException:
            if engine is not None:
                engine.close(abort=True)
                engine = None
            raise
        finally:
            if engine is not None:
                engine.close()
        if len(finished) == len(plan.cells):
            write_results(config, plan, out, run)
            run.complete()
    return {"cells": len(plan.cells), "finished": len(finished), "already_finished": already, "ran": new,
            "skipped": plan.skipped, "seconds": time.time() - started, "results": str(out / RESULTS),
            "config_hash": config.hash(), "retried": {cell: n - 1 for cell, n in attempts.items()},
            "notices": notices, "not_selected": not_selected, "amendment": amendment or None}


def record_amendment(run, amendment: dict) -> None:
    """Append the amendment to the experiment's `amendments.json` (its history of config changes)."""
    from sepo.experiments.amend import AMENDMENTS

    history = []
    if run.owns(AMENDMENTS) and (run.root / AMENDMENTS).exists():
        history = json.loads((run.root / AMENDMENTS).read_text())
    run.write_json(AMENDMENTS, [*history, {**amendment, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                            time.gmtime())}])


def select_domains(config, only: Sequence[str] | None) -> set[str]:
    """The config's domain names that `only` selects (all when it is None); an unknown one is an error."""
    names = [d.name for d in config.domains]
    if only is None:
        return set(names)
    wanted = [name.strip() for item in only for name in item.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in names]
    if unknown or not wanted:
        raise SepoError(f"--only {','.join(unknown) or '(empty)'}: not a domain of this config; "
                        f"its domains: {', '.join(names)}")
    return set(wanted)
