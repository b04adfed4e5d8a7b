"""Amending a started experiment's config: finished cells whose definition is unchanged are kept,
unfinished cells start over, and a change that reaches a finished cell is refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.errors import SepoError
from sepo.experiments.amend import definition
from sepo.experiments.execute import CELL, OWNER
from sepo.experiments.runner import run_experiment
from sepo.games import domain_names, get_domain
from sepo.runs import open_run
from tests.experiments.conftest import tiny_config, tiny_domain

ONE_LAMBDA = "    lambdas: {e: 1.0, c: 0.0, x: 0.0}\n"


def _two_domains() -> tuple[str, str, str]:
    first = tiny_domain()
    others = [n for n in domain_names() if get_domain(n).training is not None and n != first]
    second = min(others, key=lambda n: len(get_domain(n).params))
    text = tiny_config(first, **{"stages: [base, sft, grpo, sepo, constant]": "stages: [base, sepo]",
                                 "seeds: [0, 1]": "seeds: [0]",
                                 "    lambdas: {e: [1.0, 4.0], c: 0.0, x: 0.0}\n": ONE_LAMBDA})
    text = text.replace(f"  - name: {first}\n", f"  - name: {first}\n{ONE_LAMBDA}  - name: {second}\n", 1)
    return first, second, text


def _with_eval_lambda(text: str, domain: str) -> str:
    return text.replace(f"  - name: {domain}\n{ONE_LAMBDA}",
                        f"  - name: {domain}\n{ONE_LAMBDA}    eval_lambdas: {{e: 2.0, c: 0.0, x: 0.0}}\n", 1)


def _results(out: Path, prefix: str) -> dict[str, bytes]:
    return {p.name: (p / "result.json").read_bytes() for p in (out / "cells").iterdir()
            if p.name.startswith(prefix) and (p / "result.json").exists()}


def _unfinished_cell(out: Path, prefix: str) -> Path:
    """A cell folder of `prefix`'s domain as a killed cell leaves it: the runner's, without a result."""
    cell = next(c for c in json.loads((out / "plan.json").read_text())["cells"] if c["id"].startswith(prefix))
    folder = out / "cells" / cell["id"]
    with open_run(folder, CELL, {"cell": cell, "config_hash": "old"}, part_of=OWNER) as run:
        run.write_text("partial.txt", "half a cell")
        run.commit()
    return folder


def _started(tmp_path: Path):
    """A two-domain experiment whose first domain has finished and whose second has one cell a
    kill left unfinished: (first, second, config text, config path, out, that cell's folder)."""
    first, second, text = _two_domains()
    config = tmp_path / "study.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    run_experiment(config, out, only=[first])
    return first, second, text, config, out, _unfinished_cell(out, f"{second}_")


def test_amend_keeps_finished_cells_of_unchanged_domains_and_restarts_the_unfinished(tmp_path):
    first, second, text, config, out, partial = _started(tmp_path)
    before = _results(out, f"{first}_")

    config.write_text(_with_eval_lambda(text, second))  # the second domain's audit changes
    with pytest.raises(SepoError, match="different config"):
        run_experiment(config, out)
    summary = run_experiment(config, out, amend=True)

    amendment = summary["amendment"]
    assert sorted(amendment["kept"]) == sorted(before) and amendment["restarted"] == [partial.name]
    assert amendment["from"] != amendment["to"]
    assert summary["ran"] == summary["cells"] - len(before) and summary["finished"] == summary["cells"]
    assert _results(out, f"{first}_") == before  # kept byte for byte, not rerun
    assert not (partial / "partial.txt").exists() and (partial / "result.json").exists()
    history = json.loads((out / "amendments.json").read_text())
    assert [h["to"] for h in history] == [amendment["to"]]
    assert run_experiment(config, out)["ran"] == 0  # the amended config is now the experiment's
    assert "eval_lambdas" in amendment["changes"] and "→" in amendment["changes"]
    report = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    text = " ".join((tmp_path / "report" / "report.md").read_text().split())
    assert "The config was amended" in text and f"{len(before)} finished cells were kept" in text


def test_amend_refuses_a_change_that_reaches_a_finished_cell_and_touches_nothing(tmp_path):
    first, second, text, config, out, partial = _started(tmp_path)
    manifest = (out / "sepo-run.json").read_bytes()

    config.write_text(_with_eval_lambda(text, first))
    with pytest.raises(SepoError, match=rf"--amend: the change reaches finished cell {first}_.*eval_lambdas"):
        run_experiment(config, out, amend=True)
    assert (partial / "partial.txt").exists() and (out / "sepo-run.json").read_bytes() == manifest
    assert not (out / "amendments.json").exists()


def test_amend_with_overwrite_is_one_line_before_anything_is_read(tmp_path):
    config = tmp_path / "x.yaml"
    config.write_text(tiny_config())
    with pytest.raises(SepoError, match="--amend keeps .* --overwrite removes them: give one"):
        run_experiment(config, tmp_path / "out", amend=True, overwrite=True)
    assert not (tmp_path / "out").exists()


def test_a_cells_definition_ignores_the_lists_that_only_say_which_cells_exist():
    record = {"name": "a", "protocol": "rigorous", "stages": ["base"], "seeds": [0],
              "domains": [{"name": "g", "params": {"rounds": 2}, "lambdas": {"e": [1.0]}}],
              "agents": [{"name": "m", "kind": "tabular", "seeds": None}]}
    cell = {"id": "g_m_base", "domain": "g", "agent": "m", "stage": "base"}
    grown = {**record, "name": "b", "stages": ["base", "sepo"], "seeds": [0, 1],
             "domains": [{"name": "g", "params": {"rounds": 2}, "lambdas": {"e": [1.0, 2.0]}}]}
    assert definition(record, cell) == definition(grown, cell)
    resized = {**record, "domains": [{"name": "g", "params": {"rounds": 3}, "lambdas": {"e": [1.0]}}]}
    assert definition(record, cell) != definition(resized, cell)
    assert definition({**record, "protocol": "paper"}, cell) != definition(record, cell)
