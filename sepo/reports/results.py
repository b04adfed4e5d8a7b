"""An experiment's results, read for the report: the plan, each finished cell's result.json and the
results table (`results.parquet`), indexed by cell, checkpoint selection and metric.

Trained stages are read at the checkpoint chosen by safety on VALIDATION episodes, measured on TEST
episodes (held-out selection); the paper's way (best safety on the reported episodes) is kept too.
A cell whose replies mostly fail to parse (invalid-action rate above `INVALID_LIMIT`) is marked, and
so is a policy that plays one action in each situation it met (`Results.deterministic`).
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from sepo.errors import SepoError, brief
from sepo.reports.statistics import is_behaviour_rate, over_seeds, paired_difference, zero_width

PAPER_COLUMNS = (("utility", "Pay/r"), ("exploit_pool", "Exploit"), ("robustness", "Robust"),
                 ("externality", "Ext"), ("safety", "Safety"), ("nra", "NRA"))
RIGOROUS_COLUMNS = (("nra_gtbench", "NRA (GTBench)"), ("invalid_action_rate", "invalid rate"))
STAGE_LABEL = {"base": "Base", "sft": "SFT", "grpo": "payoff-only GRPO", "sepo": "SEPO",
               "shuffled": "shuffled ablation", "constant": "constant ablation", "aa": "Advantage Alignment"}
STAGE_ORDER = ("base", "sft", "sepo", "grpo", "shuffled", "constant", "aa")
WITH_LAMBDAS = ("sepo", "shuffled", "constant")
"""Stages trained at a λ point of the grid (payoff-only GRPO and Advantage Alignment are not)."""
INVALID_LIMIT = 0.5
"""A cell whose replies fail to parse more often than this (invalid-action rate on test episodes, at the
shown checkpoint) is marked in every table and hatched in the figures: its numbers are mostly those of
the failure rule's fallback action, not of a policy the agent plays (or was trained to play)."""
UNPARSED = "†"
UNPARSED_NOTE = (f"{UNPARSED} replies that do not parse: the invalid-action rate exceeds {INVALID_LIMIT:.0%} "
                 "in at least one of the row's cells, so its numbers mostly describe the failure rule's "
                 "fallback action, not a trained or chosen policy; read them as a failure to produce "
                 "parseable replies, not as a result.")
MAX_RESULT_BYTES = 16 << 20
"""The largest cell result.json read (a cell's is tens of kilobytes)."""


def paper_numbers() -> dict:
    """The paper's published table (docs/paper-protocol.md), as data."""
    import yaml

    return yaml.safe_load((Path(__file__).parent / "paper_results.yaml").read_text())


def read_plan(folder: Path) -> dict:
    """The experiment's plan.json, checked before it is used: bounded in size and nesting, a list of
    cells each with its id, domain, agent, stage, seed and λ; a damaged one is one line naming it."""
    from sepo.inputs import read_structured

    path = folder / "plan.json"
    plan = read_structured(path, "experiment plan")
    keys = ("id", "domain", "agent", "stage", "seed", "lambdas")
    cells = plan.get("cells") if isinstance(plan, dict) else None
    if not isinstance(cells, list) or not all(
            isinstance(c, dict) and all(k in c for k in keys) and isinstance(c["id"], str)
            and isinstance(c["stage"], str) for c in cells):
        raise SepoError(f"experiment plan {brief(str(path), 300)} is damaged (expected a list of cells with "
                        f"{', '.join(keys)}); restore it, or redo the experiment with --overwrite")
    return plan


def read_cell_result(path: Path) -> dict:
    """A finished cell's result.json, its size and nesting bounded before it is parsed (a file nested
    thousands of levels deep would otherwise end in Python's RecursionError), then checked as a cell
    result; a damaged one is one line naming it."""
    import json

    from sepo.experiments.execute import read_result
    from sepo.inputs import parse_json, read_text

    text = read_text(path, "cell result", MAX_RESULT_BYTES)
    try:
        parse_json(text)
    except ValueError as error:  # not JSON, nested more than sepo.inputs.MAX_DEPTH deep, a key given twice
        problem = ("not JSON: " if isinstance(error, json.JSONDecodeError) else "") + brief(str(error), 200)
        raise SepoError(f"{path} is damaged ({problem}); restore it, or redo the experiment with "
                        "--overwrite") from None
    return read_result(path)


class Results:
    """The results table indexed for the report: rows at the shown checkpoint of each cell."""

    def __init__(self, folder: Path):
        from sepo.experiments.execute import RESULT
        from sepo.experiments.runner import read_results
        from sepo.runs import read_manifest

        self.folder = folder
        self.rows = read_results(folder).to_pylist()
        self.plan = read_plan(folder)
        self.cells = {c["id"]: c for c in self.plan["cells"]}
        manifest = read_manifest(folder) or {}
        self.config = manifest.get("config") or {}
        """The experiment's config as its run folder records it."""
        self.complete = bool(manifest.get("complete"))
        """Whether the experiment finished: a cell without a result is then missing, not still to run."""
        self.amendments = read_amendments(folder)
        """The config changes `sepo experiment run --amend` accepted, oldest first."""
        self.results = {}
        for cell_id in self.cells:
            path = folder / "cells" / cell_id / RESULT
            if path.exists():
                self.results[cell_id] = read_cell_result(path)
        self.value = defaultdict(dict)  # (cell, selection) -> metric -> (value, low, high, exact)
        for row in self.rows:
            if row["split"] != "test":
                continue
            for selection in ("validation", "test"):
                if row[f"chosen_by_{selection}"]:
                    value, low, high = (math.nan if row[k] is None else row[k]
                                        for k in ("value", "low", "high"))
                    self.value[(row["cell"], selection)][row["metric"]] = (value, low, high, row["exact"])
        self.config_hash = self.rows[0]["config_hash"] if self.rows else self.plan.get("config_hash")
        self.protocol = self.rows[0]["protocol"] if self.rows else "?"

    # ------------------------------------------------------------------ what is there

    @property
    def missing(self) -> list[str]:
        """Cells of the plan without a result.json, in plan order: removed after the experiment finished
        (when `complete`), else still running or not started."""
        return [cell_id for cell_id in self.cells if cell_id not in self.results]

    def missing_reason(self) -> str:
        """Why a finished experiment's cells have no result.json, as far as the folder tells."""
        if not (self.folder / "cells").is_dir():
            return "all of cells/ was removed"
        return "removed after the experiment finished"

    def incomplete_lines(self, most: int = 10) -> list[str]:
        """What the report lacks, one line each (at most `most` cells named, then a count); empty when
        every planned cell has its result."""
        missing = self.missing
        if not missing:
            return []
        if not self.complete:
            return [f"the experiment has not finished: {len(missing)} of {len(self.cells)} cells have no "
                    "result yet; this report is partial and is rebuilt by the next `sepo report`"]
        lines = [f"missing: {len(missing)} of {len(self.cells)} cells listed in plan.json have no "
                 f"result.json ({self.missing_reason()}); the report is marked incomplete and leaves them "
                 "out of every table"]
        lines += [f"missing: cells/{cell}/result.json ({self.cell_label(cell)})" for cell in missing[:most]]
        if len(missing) > most:
            lines.append(f"missing: ... and {len(missing) - most} more (listed in the report's appendix)")
        return lines

    def decoding_line(self) -> str | None:
        """How the language-model agents were read (the protocol's decoding with the config's settings
        in its place), or None when the experiment has none: the numbers hold under this decoding only."""
        from sepo.policies.replies import decoding_for

        if not any(agent.get("kind") in ("hf", "openai") for agent in self.config.get("agents", [])):
            return None
        given = self.config.get("decoding", {})
        d = decoding_for(self.config.get("protocol", "rigorous"), **{name: given.get(name) for name in (
            "temperature", "max_new_tokens", "top_p", "top_k", "repetition_penalty")})
        filters = ", ".join(f"{name} {value:g}" for name, value, off in (
            ("top-p", d.top_p, 1.0), ("top-k", d.top_k, 0), ("repetition penalty", d.repetition_penalty, 1.0))
            if value != off)
        if d.greedy:
            return (f"Language-model agents were read greedily (temperature 0, one reply per state, read "
                    f"exactly), up to {d.max_new_tokens} new tokens a reply; their numbers hold under this "
                    "decoding.")
        samples = given.get("samples")
        return (f"Language-model agents were read at temperature {d.temperature:g}"
                + (f", {filters}" if filters else "") + f", up to {d.max_new_tokens} new tokens a reply"
                + (f", {samples} sampled replies per state where the policy is not read exactly"
                   if samples else "")
                + "; their numbers hold under this decoding.")

    def domains(self) -> list[str]:
        return list(dict.fromkeys(c["domain"] for c in self.cells.values()))

    def groups(self, domain: str) -> dict:
        """(agent, stage, λ) -> [cell ids over seeds] of finished cells, in plan order."""
        out = defaultdict(list)
        for cell_id, cell in self.cells.items():
            if cell["domain"] == domain and cell_id in self.results:
                lambdas = tuple(cell["lambdas"]) if cell["lambdas"] else None
                out[(cell["agent"], cell["stage"], lambdas)].append(cell_id)
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], stage_rank(kv[0][1]), kv[0][2] or ())))

    def unit(self, domain: str) -> str:
        """The domain's payoff unit (utility, exploitability and the adversarial gap are in it)."""
        return next((r.get("utility_unit") for c, r in self.results.items()
                     if self.cells[c]["domain"] == domain and r.get("utility_unit")), "") or "payoff"

    def safety_lambdas(self, domain: str) -> tuple[float, float, float] | None:
        """(λe, λc, λx) of the domain's reported safety: its `eval_lambdas`, else the grid's first point."""
        for entry in self.config.get("domains", []):
            if entry.get("name") != domain:
                continue
            given = entry.get("eval_lambdas")
            if isinstance(given, dict):
                return tuple(float(given.get(k, 0.0)) for k in "ecx")
            grid = entry.get("lambdas") or {}
            try:
                return tuple(float((grid.get(k) or [0.0])[0]) for k in "ecx")
            except (TypeError, ValueError, IndexError):
                return None
        return None

    # ------------------------------------------------------------------ numbers

    def metric(self, cell_ids: list[str], name: str, selection: str = "validation"):
        """(value, low, high, how) over the cells (seeds) of a group."""
        return over_seeds(name, [self.value[(c, selection)].get(name) for c in cell_ids])

    def paired(self, cells_a: list[str], cells_b: list[str], name: str):
        """(mean, low, high, pairs, cells) of metric(a) − metric(b), paired by seed: a cell of `a` meets
        the cell of `b` with its seed, or `b`'s one unseeded cell (a base); `cells` are those that met."""
        by_seed_b = {self.cells[c]["seed"]: c for c in cells_b}
        unseeded = by_seed_b.get(None)
        pairs, used = [], []
        for cell in cells_a:
            other = by_seed_b.get(self.cells[cell]["seed"], unseeded)
            a = self.value[(cell, "validation")].get(name)
            b = self.value[(other, "validation")].get(name) if other else None
            if a is None or b is None or math.isnan(a[0]) or math.isnan(b[0]):
                continue
            pairs.append((a, b))
            used += [c for c in (cell, other) if c not in used]
        difference = paired_difference(pairs)
        return None if difference is None else (*difference, used)

    def compare(self, cells: list[str], other: list[str], other_label: str, name: str) -> dict | None:
        """SEPO's `cells` minus `other`'s on metric `name`, paired by seed (`delta` as `paired`'s), with
        the flags of degenerate policies among the cells that met: `deterministic` (and the sides that
        are), `unparsed` (replies mostly unparsed), `zero-width` (every seed gave the same difference);
        `seeds`: SEPO's seeds that met. None where no seed met with both numbers."""
        delta = self.paired(cells, other, name)
        if delta is None:
            return None
        met = delta[4]
        sides = {"SEPO": [c for c in met if c in cells], other_label: [c for c in met if c in other]}
        deterministic = [side for side, side_cells in sides.items() if self.deterministic(side_cells)]
        unparsed = any(self.unparsed(side_cells) for side_cells in sides.values())
        flags = ((["deterministic"] if deterministic else []) + (["unparsed"] if unparsed else [])
                 + (["zero-width"] if zero_width(delta) else []))
        return {"delta": delta, "cells": met, "flags": flags, "deterministic": deterministic,
                "unparsed": unparsed, "seeds": self.seeds(sides["SEPO"])}

    def unparsed(self, cell_ids: list[str]) -> bool:
        """Whether any of the cells' replies fail to parse more often than `INVALID_LIMIT` (shown
        checkpoint, test episodes)."""
        rates = [self.value[(c, "validation")].get("invalid_action_rate") for c in cell_ids]
        return any(r is not None and not math.isnan(r[0]) and r[0] > INVALID_LIMIT for r in rates)

    def behaviour(self, cell_id: str) -> dict[str, float]:
        """The cell's action rates on test episodes (the domain's "<domain>/..._rate..." metrics), by name."""
        return {name: entry[0] for name, entry in sorted(self.value[(cell_id, "validation")].items())
                if is_behaviour_rate(name) and not math.isnan(entry[0])}

    def deterministic(self, cell_ids: list[str]) -> bool:
        """Whether every cell's policy played one action in each situation it met: every action rate the
        domain measures is 0 or 1 (always defect, always bet and call, ...). Such a policy's numbers vary
        only with the opponents' play, and a difference between two of them can have no spread over seeds."""
        rates = [self.behaviour(c) for c in cell_ids]
        return bool(cell_ids) and all(r and all(v in (0.0, 1.0) for v in r.values()) for r in rates)

    def describe(self, cell_ids: list[str], most: int = 8) -> str | None:
        """What the group's policy does, in one line: its action rates (mean over seeds), rates of one kind
        across situations joined ("bet rate J/K/Q 1.00/1.00/0.09"); None where the domain measures none."""
        rates = [self.behaviour(c) for c in cell_ids]
        names = list(dict.fromkeys(n for r in rates for n in r))
        if not names:
            return None
        kinds: dict[str, list[tuple[str, float]]] = {}
        for name in names:
            found = [r[name] for r in rates if name in r]
            short = name.split("/", 1)[1]
            stem, _, situation = short.rpartition("_")
            key, part = (stem, situation) if stem.endswith("rate") or "_rate_" in stem else (short, "")
            kinds.setdefault(key, []).append((part, sum(found) / len(found)))
        parts = []
        for key, entries in list(kinds.items())[:most]:
            text = key.replace("_", " ")
            if len(entries) == 1 and not entries[0][0]:
                parts.append(f"{text} {entries[0][1]:.2f}")
            else:
                situations, values = "/".join(p for p, _ in entries), "/".join(f"{v:.2f}" for _, v in entries)
                parts.append(f"{text} {situations} {values}")
        return "; ".join(parts) + ("; ..." if len(kinds) > most else "")

    def same_numbers(self, cell_a: str, cell_b: str) -> bool:
        """Whether two cells gave the same number for every metric at their shown checkpoints (test
        episodes)."""
        a, b = self.value.get((cell_a, "validation"), {}), self.value.get((cell_b, "validation"), {})
        if not a or set(a) != set(b):
            return False
        return all((math.isnan(a[k][0]) and math.isnan(b[k][0]))
                   or abs(a[k][0] - b[k][0]) <= 1e-12 * max(1.0, abs(a[k][0])) for k in a)

    # ------------------------------------------------------------------ labels

    def planned(self, domain: str, agent: str, stage: str, lambdas) -> int:
        """How many cells (seeds) the plan has for a group, finished or not."""
        return sum(1 for c in self.cells.values() if c["domain"] == domain and c["agent"] == agent
                   and c["stage"] == stage and (tuple(c["lambdas"]) if c["lambdas"] else None) == lambdas)

    def label(self, agent: str, stage: str, lambdas, cell_ids: list[str]) -> str:
        """The row label of a group, marked when its replies do not parse, and with how many of its
        planned seeds finished when not all did (a half-finished run's row is not the stage's result)."""
        planned = self.planned(self.cells[cell_ids[0]]["domain"], agent, stage, lambdas) if cell_ids else 0
        partial = f" ({len(cell_ids)} of {planned} seeds finished)" if len(cell_ids) < planned else ""
        mark = f" {UNPARSED}" if self.unparsed(cell_ids) else ""
        return group_label(agent, stage, lambdas) + partial + mark

    def seeds(self, cell_ids: list[str]) -> str:
        """The seeds of a group's cells, as a table shows them ("0, 1, 2"; "-" for a base audit)."""
        seeds = sorted({self.cells[c]["seed"] for c in cell_ids if self.cells[c]["seed"] is not None})
        return ", ".join(str(s) for s in seeds) or "-"

    def cell_label(self, cell_id: str) -> str:
        """A cell as a reader names it: domain · agent · stage (λ) · seed."""
        cell = self.cells[cell_id]
        lambdas = tuple(cell["lambdas"]) if cell["lambdas"] else None
        seed = "" if cell["seed"] is None else f" · seed {cell['seed']}"
        return f"{cell['domain']} · {group_label(cell['agent'], cell['stage'], lambdas)}{seed}"

    def all_exact(self, domain: str, name: str) -> bool:
        """Whether every value of `name` the domain's tables show (each cell's checkpoint chosen on
        validation, test split) is exact (results.parquet's `exact`)."""
        found = [self.value.get((cell_id, "validation"), {}).get(name) for cell_id, cell in self.cells.items()
                 if cell["domain"] == domain]
        found = [f for f in found if f is not None]
        return bool(found) and all(f[3] for f in found)

    def exact_name(self, domain: str) -> str | None:
        """The domain's exact value (exploitability, adversarial_gap, ...) as its cells name it."""
        for cell_id, result in self.results.items():
            if self.cells[cell_id]["domain"] == domain and result.get("exact_value"):
                return result["exact_value"]
        return None


def stage_rank(stage: str) -> int:
    """A stage's place in tables (a stage this report does not know goes last)."""
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def lambda_text(lambdas) -> str:
    """A λ point as the tables show it ("1.5/2.4/0"); "-" for none."""
    return "/".join(f"{v:g}" for v in lambdas) if lambdas else "-"


def group_label(agent: str, stage: str, lambdas) -> str:
    """"agent · stage", with the λ point of a stage trained at one."""
    label = f"{agent} · {STAGE_LABEL.get(stage, stage)}"
    if stage in WITH_LAMBDAS and lambdas:
        label += " λ=" + lambda_text(lambdas)
    return label


def check_experiment(folder: str | Path) -> Path:
    """The experiment folder a report reads, or one line saying what is there instead."""
    from sepo.runs import read_manifest

    folder = Path(folder)
    if not folder.is_dir():
        if folder.exists():  # most likely the config file: the report reads the experiment's --out folder
            raise SepoError(f"{folder} is a file, not an experiment folder; give the --out folder of "
                            "`sepo experiment run`")
        raise SepoError(f"experiment folder not found: {folder}")
    manifest = read_manifest(folder)
    if manifest is None or manifest["command"] != "experiment run":
        raise SepoError(f"{folder} is not the output of `sepo experiment run`")
    return folder


def experiment_state(folder: Path) -> dict:
    """What a report of `folder` depends on besides its path: the experiment's config hash, a digest of
    the files it reads (`built_from`), and whether every cell finished (a report of a running
    experiment is redone on the next call)."""
    from sepo.runs import read_manifest

    manifest = read_manifest(folder) or {}
    digest, cells = None, []
    if (folder / "plan.json").is_file():
        try:
            plan = read_plan(folder)
        except SepoError:  # damaged: the report's own read of it says so, in one line
            plan = {}
        digest = plan.get("config_hash")
        cells = [c["id"] for c in plan.get("cells", [])]
    return {"config_hash": digest, "built_from": inputs_digest(folder, cells),
            "experiment_complete": bool(manifest.get("complete"))}


def read_amendments(folder: Path) -> list[dict]:
    """The experiment's `amendments.json` (none: []); a damaged one is one line naming it."""
    from sepo.experiments.amend import AMENDMENTS

    path = folder / AMENDMENTS
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, list) or not all(isinstance(a, dict) for a in data):
            raise ValueError("not a list of amendments")
    except (OSError, ValueError) as error:
        raise SepoError(f"{path} cannot be read ({error}); restore it from the experiment's run") from None
    return data


def inputs_digest(folder: Path, cells: list) -> str:
    """sha256 over the files a report reads: plan.json, results.parquet and every cell's result.json
    (a missing one counts as missing): a report of an experiment rerun with the same config, or with a
    cell's result removed, is built from other inputs and so is redone, never called complete."""
    import hashlib

    digest = hashlib.sha256()
    names = ["plan.json", "results.parquet", "amendments.json",
             *(f"cells/{c}/result.json" for c in cells if isinstance(c, str))]
    for name in names:
        path = folder / name
        digest.update(name.encode() + b"\0")
        if path.is_file():
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        else:
            digest.update(b"missing")
        digest.update(b"\0")
    return digest.hexdigest()


DERIVED = ("config_hash", "built_from")
"""The report's config fields that record what it was built from: a report of the same experiment
differing only in them is stale and rebuilt (`sepo.runs.open_run(derived=)`), never called complete."""


def report_config(folder: Path, state: dict) -> dict:
    """The report run's config: the experiment it reads (its identity) and what it was built from."""
    return {"experiment": str(folder.resolve()), "config_hash": state["config_hash"],
            "built_from": state["built_from"]}
