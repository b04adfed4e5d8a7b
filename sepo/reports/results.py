"""An experiment's results, read for the report: the plan, each finished cell's result.json and the
results table (`results.parquet`), indexed by cell, checkpoint selection and metric.

Trained stages are read at the checkpoint chosen by safety on VALIDATION episodes, measured on TEST
episodes (held-out selection); the paper's way (best safety on the reported episodes) is kept too.
A cell whose replies mostly fail to parse (invalid-action rate above `INVALID_LIMIT`) is marked.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from sepo.errors import SepoError
from sepo.reports.statistics import over_seeds, paired_difference

PAPER_COLUMNS = (("utility", "Pay/r"), ("exploit_pool", "Exploit"), ("robustness", "Robust"), ("externality", "Ext"),
                 ("safety", "Safety"), ("nra", "NRA"))
RIGOROUS_COLUMNS = (("nra_gtbench", "NRA (GTBench)"), ("invalid_action_rate", "invalid rate"))
STAGE_LABEL = {"base": "Base", "sft": "SFT", "grpo": "payoff-only GRPO", "sepo": "SEPO", "constant": "constant ablation",
               "aa": "Advantage Alignment"}
STAGE_ORDER = ("base", "sft", "sepo", "grpo", "constant", "aa")
INVALID_LIMIT = 0.5
"""A cell whose replies fail to parse more often than this (invalid-action rate on test episodes, at the
shown checkpoint) is marked in every table and hatched in Figure 1: its numbers are mostly those of the
failure rule's fallback action, not of a policy the agent plays (or was trained to play)."""
UNPARSED = "†"
UNPARSED_NOTE = (f"{UNPARSED} replies that do not parse: the invalid-action rate exceeds {INVALID_LIMIT:.0%} in at least one "
                 "of the row's cells, so its numbers mostly describe the failure rule's fallback action, not a trained or "
                 "chosen policy; read them as a failure to produce parseable replies, not as a result.")


def paper_numbers() -> dict:
    """The paper's published table (paper-protocol.md §5), as data."""
    import yaml

    return yaml.safe_load((Path(__file__).parent / "paper_results.yaml").read_text())


class Results:
    """The results table indexed for the report: rows at the shown checkpoint of each cell."""

    def __init__(self, folder: Path):
        from sepo.experiments.execute import RESULT, read_result
        from sepo.experiments.runner import read_results
        from sepo.runs import read_manifest
        from sepo.training.checkpoint import read_json

        self.folder = folder
        self.rows = read_results(folder).to_pylist()
        self.plan = read_json(folder / "plan.json", "experiment plan")
        self.cells = {c["id"]: c for c in self.plan["cells"]}
        manifest = read_manifest(folder) or {}
        self.config = manifest.get("config") or {}
        """The experiment's config as its run folder records it."""
        self.complete = bool(manifest.get("complete"))
        """Whether the experiment finished: a cell without a result is then missing, not still to run."""
        self.results = {}
        for cell_id in self.cells:
            path = folder / "cells" / cell_id / RESULT
            if path.exists():
                self.results[cell_id] = read_result(path)
        self.value = defaultdict(dict)  # (cell, selection) -> metric -> (value, low, high, exact)
        for row in self.rows:
            if row["split"] != "test":
                continue
            for selection in ("validation", "test"):
                if row[f"chosen_by_{selection}"]:
                    numbers = tuple(float("nan") if row[k] is None else row[k] for k in ("value", "low", "high"))
                    self.value[(row["cell"], selection)][row["metric"]] = (*numbers, row["exact"])
        self.config_hash = self.rows[0]["config_hash"] if self.rows else self.plan.get("config_hash")
        self.protocol = self.rows[0]["protocol"] if self.rows else "?"

    def decoding_line(self) -> str | None:
        """How the language-model agents were read (the protocol's decoding with the config's settings
        in its place), or None when the experiment has none: the numbers hold under this decoding only."""
        from sepo.policies.replies import decoding_for

        if not any(agent.get("kind") in ("hf", "openai") for agent in self.config.get("agents", [])):
            return None
        given = self.config.get("decoding", {})
        d = decoding_for(self.config.get("protocol", "rigorous"), **{name: given.get(name) for name in (
            "temperature", "max_new_tokens", "top_p", "top_k", "repetition_penalty")})
        filters = ", ".join(f"{name} {value:g}" for name, value, off in (("top-p", d.top_p, 1.0), ("top-k", d.top_k, 0),
                            ("repetition penalty", d.repetition_penalty, 1.0)) if value != off)
        if d.greedy:
            return (f"Language-model agents were read greedily (temperature 0, one reply per state, read exactly), "
                    f"up to {d.max_new_tokens} new tokens a reply; their numbers hold under this decoding.")
        samples = given.get("samples")
        return (f"Language-model agents were read at temperature {d.temperature:g}" + (f", {filters}" if filters else "")
                + f", up to {d.max_new_tokens} new tokens a reply" + (f", {samples} sampled replies per state where the "
                "policy is not read exactly" if samples else "") + "; their numbers hold under this decoding.")

    def domains(self) -> list[str]:
        return list(dict.fromkeys(c["domain"] for c in self.cells.values()))

    def groups(self, domain: str) -> dict:
        """(agent, stage, λ) -> [cell ids over seeds] of finished cells, in plan order."""
        out = defaultdict(list)
        for cell_id, cell in self.cells.items():
            if cell["domain"] == domain and cell_id in self.results:
                out[(cell["agent"], cell["stage"], tuple(cell["lambdas"]) if cell["lambdas"] else None)].append(cell_id)
        return dict(sorted(out.items(), key=lambda kv: (kv[0][0], STAGE_ORDER.index(kv[0][1]), kv[0][2] or ())))

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
            a, b = self.value[(cell, "validation")].get(name), self.value[(other, "validation")].get(name) if other else None
            if a is None or b is None or math.isnan(a[0]) or math.isnan(b[0]):
                continue
            pairs.append((a, b))
            used += [c for c in (cell, other) if c not in used]
        difference = paired_difference(pairs)
        return None if difference is None else (*difference, used)

    def unparsed(self, cell_ids: list[str]) -> bool:
        """Whether any of the cells' replies fail to parse more often than `INVALID_LIMIT` (shown checkpoint, test)."""
        rates = [self.value[(c, "validation")].get("invalid_action_rate") for c in cell_ids]
        return any(r is not None and not math.isnan(r[0]) and r[0] > INVALID_LIMIT for r in rates)

    def planned(self, domain: str, agent: str, stage: str, lambdas) -> int:
        """How many cells (seeds) the plan has for a group, finished or not."""
        return sum(1 for c in self.cells.values() if c["domain"] == domain and c["agent"] == agent and c["stage"] == stage
                   and (tuple(c["lambdas"]) if c["lambdas"] else None) == lambdas)

    def label(self, agent: str, stage: str, lambdas, cell_ids: list[str]) -> str:
        """The row label of a group, marked when its replies do not parse, and with how many of its
        planned seeds finished when not all did (a half-finished run's row is not the stage's result)."""
        planned = self.planned(self.cells[cell_ids[0]]["domain"], agent, stage, lambdas) if cell_ids else 0
        partial = f" ({len(cell_ids)} of {planned} seeds finished)" if len(cell_ids) < planned else ""
        return group_label(agent, stage, lambdas) + partial + (f" {UNPARSED}" if self.unparsed(cell_ids) else "")

    def all_exact(self, domain: str, name: str) -> bool:
        """Whether every value of `name` the domain's tables show (each cell's checkpoint chosen on
        validation, test split) is exact (results.parquet's `exact`)."""
        found = [self.value.get((cell_id, "validation"), {}).get(name) for cell_id, cell in self.cells.items()
                 if cell["domain"] == domain]
        found = [f for f in found if f is not None]
        return bool(found) and all(f[3] for f in found)

    def exact_name(self, domain: str) -> str | None:
        for cell_id, result in self.results.items():
            if self.cells[cell_id]["domain"] == domain and result.get("exact_value"):
                return result["exact_value"]
        return None


def group_label(agent: str, stage: str, lambdas) -> str:
    label = f"{agent} · {STAGE_LABEL[stage]}"
    if stage in ("sepo", "constant") and lambdas:
        label += " λ=" + "/".join(f"{v:g}" for v in lambdas)
    return label


def check_experiment(folder: str | Path) -> Path:
    from sepo.runs import read_manifest

    folder = Path(folder)
    if not folder.is_dir():
        if folder.exists():  # most likely the config file: the report reads the experiment's --out folder
            raise SepoError(f"{folder} is a file, not an experiment folder; give the --out folder of `sepo experiment run`")
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
    plan = folder / "plan.json"
    digest = None
    cells = []
    if plan.is_file():
        from sepo.training.checkpoint import read_json

        data = read_json(plan, "experiment plan")
        data = data if isinstance(data, dict) else {}
        digest = data.get("config_hash")
        cells = [c.get("id") for c in data.get("cells") or [] if isinstance(c, dict)] if isinstance(data.get("cells"), list) else []
    return {"config_hash": digest, "built_from": inputs_digest(folder, cells),
            "experiment_complete": bool(manifest.get("complete"))}


def inputs_digest(folder: Path, cells: list) -> str:
    """sha256 over the files a report reads: plan.json, results.parquet and every cell's result.json
    (a missing one counts as missing). Before, a report's identity was the config hash alone, so a
    report of an experiment rerun with the same config was called complete, with the old numbers."""
    import hashlib

    digest = hashlib.sha256()
    for name in ["plan.json", "results.parquet", *(f"cells/{c}/result.json" for c in cells if isinstance(c, str))]:
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
    return {"experiment": str(folder.resolve()), "config_hash": state["config_hash"], "built_from": state["built_from"]}
