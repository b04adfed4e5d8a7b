"""Amending the config of an experiment that has started (`sepo experiment run --amend`).

A long study sometimes needs a change after some cells have finished: a domain's size that makes
its cells too slow, a seed added. A cell's *definition* is everything in the config that changes
what the cell computes: its own record (domain, agent, stage, seed, λ), its domain's entry (game
parameters, evaluation λ), its agent's entry and the experiment-wide settings (protocol, episodes,
training, decoding, ...), less the lists that only say which cells exist. An amendment is accepted
when no finished cell's definition changes: those cells keep their results, every unfinished cell
starts over under the new config (what it wrote is removed), and the change is recorded in
`amendments.json`. A change that reaches a finished cell is refused: its result would sit in one
table beside cells of another config.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sepo.errors import SepoError
from sepo.experiments.cells import Plan
from sepo.experiments.execute import OWNER, RESULT
from sepo.runs import describe_difference, remove_part

AMENDMENTS = "amendments.json"
PLAN_ONLY = {"name", "domains", "agents", "stages", "seeds"}
"""Experiment-wide fields that say which cells exist, not what a cell computes."""
ENTRY_PLAN_ONLY = {"lambdas", "stages", "seeds"}
"""A domain's or agent's fields that only say which cells exist (a cell's own λ is in its record)."""


def digest(record: dict) -> str:
    """The config digest of a recorded config (`ExperimentConfig.hash` of the same record)."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def definition(record: dict, cell: dict) -> dict | None:
    """What `cell` (a cell record) computes under the config `record`; None if the config has no
    such domain or agent."""
    domain = next((d for d in record["domains"] if d["name"] == cell["domain"]), None)
    agent = next((a for a in record["agents"] if a["name"] == cell["agent"]), None)
    if domain is None or agent is None:
        return None
    return {
        "cell": cell,
        "domain": {k: v for k, v in domain.items() if k not in ENTRY_PLAN_ONLY},
        "agent": {k: v for k, v in agent.items() if k not in ENTRY_PLAN_ONLY},
        "experiment": {k: v for k, v in record.items() if k not in PLAN_ONLY},
    }


def check_and_prepare(out: Path, saved: dict, new: dict, plan: Plan) -> dict:
    """Accept the experiment in `out`, recorded under `saved`, going on under `new` with `plan`:
    refuse a change that reaches a finished cell; remove the unfinished cells (they start over).
    Returns the amendment's record."""
    try:
        old_cells = json.loads((out / "plan.json").read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        raise SepoError(f"--amend: {out / 'plan.json'} cannot be read, so the cells cannot be compared; "
                        "use another --out") from None
    new_cells = {c.id: c.record() for c in plan.cells}
    kept, changed, restarted = [], [], []
    for cell in old_cells:
        folder = out / "cells" / cell["id"]
        if not folder.is_dir():
            continue
        if not (folder / RESULT).exists():
            restarted.append(cell["id"])
            continue
        successor = new_cells.get(cell["id"])
        recorded = definition(saved, cell)
        if successor is None or recorded is None or recorded != definition(new, successor):
            changed.append((cell["id"], recorded, None if successor is None else definition(new, successor)))
        else:
            kept.append(cell["id"])
    if changed:
        name, recorded, amended = changed[0]
        what = ("it is not in the new plan" if amended is None
                else describe_difference(recorded or {}, amended, as_change=True))
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise SepoError(f"--amend: the change reaches finished cell {name}{more} ({what}); its result "
                        "would sit beside cells of another config: keep what finished cells depend on, "
                        "or use another --out")
    for name in restarted:
        remove_part(out / "cells" / name, OWNER)
    return {"from": digest(saved), "to": digest(new),
            "changes": describe_difference(saved, new, limit=8, as_change=True),
            "kept": kept, "restarted": restarted}
