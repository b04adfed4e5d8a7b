"""`sepo report`: the paper's tables, Figure 1, the ablation, curves and the frontier; the HTML
renders in a real browser (headless Chromium) with its tables and figures."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.reports.experiment import paper_numbers
from tests.experiments.conftest import tiny_domain

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def _copy(finished_experiment: Path, tmp_path: Path) -> Path:
    """A copy of the finished experiment (without its report) to change."""
    return Path(shutil.copytree(finished_experiment, tmp_path / "experiment",
                                ignore=shutil.ignore_patterns("report")))


@pytest.fixture(scope="module")
def report(finished_experiment):
    result = CliRunner().invoke(app, ["report", str(finished_experiment)])
    assert result.exit_code == 0, result.output
    return finished_experiment / "report"


def test_the_report_has_the_papers_table_figure_1_the_ablation_and_the_figures(report):
    domain = tiny_domain()
    md = (report / "report.md").read_text()
    assert f"## {domain}" in md
    assert "| agent · stage | seeds | Pay/r | Exploit | Robust | Ext | Safety | NRA |" in md
    for row in ("tab · Base", "tab · SFT", "tab · SEPO λ=1/0/0", "tab · payoff-only GRPO",
                "tab · constant ablation λ=4/0/0"):
        assert f"| {row} |" in md
    assert "## Figure 1: SEPO − payoff-only GRPO, − Base" in md and "SEPO − constant ablation" in md
    assert "## The paper's Figure 1: ΔSafety = SEPO − Base" in md
    assert "held-out selection" in md and "chosen on validation" in md
    html = (report / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) >= 3 and 'src="http' not in html  # self-contained
    assert f'id="table-{domain}"' in html and 'id="table-figure-1"' in html


def test_the_appendix_names_every_cell_behind_the_numbers(report, finished_experiment):
    import json

    md = (report / "report.md").read_text()
    plan = json.loads((finished_experiment / "plan.json").read_text())
    for cell in plan["cells"]:
        assert cell["id"] in md


def test_the_papers_numbers_are_data_for_registered_names():
    published = paper_numbers()
    assert published["columns"] == ["utility", "exploit_pool", "robustness", "externality", "safety", "nra"]
    for domain, entry in published["domains"].items():
        assert set(entry["rows"]) == {"base", "sft", "sepo"}
        assert all(len(v) == 6 for v in entry["rows"].values())


def test_report_refuses_a_folder_that_is_no_experiment(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not the output of `sepo experiment run`" in result.output


def _chromium(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="chromium is not installed (apt-get install chromium)")
def test_report_html_renders_its_tables_and_figures_in_headless_chromium(report, tmp_path):
    assert CHROMIUM is not None, "CI must install chromium (.ci/run does)"
    page = (report / "report.html").resolve().as_uri()
    dom = _chromium(["--virtual-time-budget=5000", "--dump-dom", page], tmp_path).stdout
    figures = re.search(r'data-figures-decoded="(\d+)/(\d+)"', dom)
    assert figures, "the page's load handler did not run"
    assert int(figures.group(1)) == int(figures.group(2)) >= 3, "figures that did not decode"
    assert dom.count("<table") >= 4
    shot = tmp_path / "shot.png"
    _chromium([f"--screenshot={shot}", "--window-size=1280,2400", page], tmp_path)
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    ink = (pixels.sum(-1) < 600).mean()
    header_blue = (np.abs(pixels - np.array([0xdd, 0xe6, 0xf0])).sum(-1) <= 6).mean()  # table header cells
    matplotlib_blue = (np.abs(pixels - np.array([31, 119, 180])).sum(-1) <= 30).mean()  # lines and bars
    assert ink > 0.01, f"screenshot nearly blank ({ink:.4f} dark pixels)"
    assert header_blue > 0.002, "no table headers in the screenshot"
    assert matplotlib_blue > 0.0002, "no plotted figure in the screenshot"


def test_under_the_paper_protocol_the_published_numbers_stand_beside_the_reproduced(tmp_path):
    from sepo.experiments.runner import run_experiment
    from sepo.reports.experiment import build_report
    from tests.experiments.conftest import tiny_config

    domain = tiny_domain()
    if domain not in paper_numbers()["domains"]:
        pytest.skip("no published numbers for the test domain")
    config = tmp_path / "paper.yaml"
    config.write_text(tiny_config(**{"name: tiny": "name: tiny\nprotocol: paper",
                                     "[base, sft, grpo, sepo, constant]": "[base]"}))
    run_experiment(config, tmp_path / "out")
    md = "\n".join(build_report(tmp_path / "out").md)
    published = paper_numbers()["domains"][domain]["rows"]
    assert "| tab · Base |" in md
    line = next(row for row in md.splitlines() if row.startswith("| paper · Base |"))
    assert f"{published['base'][4]:.3f}" in line  # the published safety
    assert "| paper · SEPO |" in md


def test_cells_whose_replies_do_not_parse_are_marked_in_tables_and_hatched(finished_experiment, tmp_path):
    """A cell whose replies mostly fail to parse (invalid rate above the stated limit) shows the failure
    rule's fallback, not a result: its rows are marked and its bars hatched and marked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.reports.experiment import (
        INVALID_LIMIT,
        UNPARSED,
        Results,
        build_report,
        figure1,
        figure_delta_safety,
    )

    folder = _copy(finished_experiment, tmp_path)
    table = pq.read_table(folder / "results.parquet")
    rows = table.to_pylist()
    sepo_cells = sorted({r["cell"] for r in rows if r["stage"] == "sepo"})
    failing = sepo_cells[0]  # its replies (say) never parse
    for row in rows:
        if row["cell"] == failing and row["metric"] == "invalid_action_rate":
            row["value"] = row["low"] = row["high"] = 1.0
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "results.parquet")
    assert 1.0 > INVALID_LIMIT
    md = "\n".join(build_report(folder).md)
    cells = Results(folder).cells
    lam = "/".join(f"{v:g}" for v in cells[failing]["lambdas"])
    other = {"/".join(f"{v:g}" for v in c["lambdas"]) for c in cells.values() if c["stage"] == "sepo"} - {lam}
    marked = [line for line in md.splitlines() if UNPARSED in line and line.startswith("|")]
    assert any(line.startswith(f"| tab · SEPO λ={lam} {UNPARSED} |") for line in marked)  # the paper table
    assert not any(f"SEPO λ={o} " in line for line in marked for o in other)
    assert f"{UNPARSED} replies that do not parse" in md and "Hatched grey bars" in md
    _, bars = figure_delta_safety(Results(folder))
    assert [b["unparsed"] for b in bars] == [failing in b["cells"] for b in bars]
    assert any(b["unparsed"] for b in bars)
    _, figure_bars = figure1(Results(folder))
    at = tuple(cells[failing]["lambdas"])
    flagged = [("unparsed" in b["flags"]) == (b["lambdas"] == at) for b in figure_bars]
    assert figure_bars and all(flagged)


def test_figure_1_says_why_a_domain_with_base_and_sepo_has_no_bar(finished_experiment, tmp_path):
    """A domain whose safety is not measured (OpenSpiel's Leduc under the paper protocol: no pools)
    gets a word saying why its ΔSafety bar is absent, not a claim that no Base and SEPO cells finished."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.reports.experiment import build_report

    folder = _copy(finished_experiment, tmp_path)
    table = pq.read_table(folder / "results.parquet")
    rows = [r for r in table.to_pylist() if r["metric"] != "safety"]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "results.parquet")
    md = "\n".join(build_report(folder).md)
    figure = md[md.index("## Figure 1"):]
    assert f"No bar for {tiny_domain()} (tab): safety was not measured" in figure
    assert "No domain has both a Base and a SEPO cell finished" not in figure


@pytest.fixture(scope="module")
def family_report(tmp_path_factory):
    """The report of an experiment on a registry family's member (`openspiel:kuhn_poker`), a game
    the paper does not have."""
    pytest.importorskip("pyspiel")
    from sepo.experiments.runner import run_experiment
    from tests.experiments.conftest import tiny_config

    root = tmp_path_factory.mktemp("family")
    (root / "tiny.yaml").write_text(tiny_config("openspiel:kuhn_poker") + "sft: {mixture: cfr}\n")
    run_experiment(root / "tiny.yaml", root / "out")
    result = CliRunner().invoke(app, ["report", str(root / "out")])
    assert result.exit_code == 0, result.output + result.stderr
    return root / "out" / "report"


def test_a_family_members_figures_get_portable_file_names(family_report):
    """Its figures are written without the colon a markdown link reads as a URL scheme."""
    figures = sorted(p.name for p in family_report.glob("*.png"))
    assert "openspiel_kuhn_poker_curves.png" in figures and not [f for f in figures if ":" in f]
    assert "](openspiel_kuhn_poker_curves.png)" in (family_report / "report.md").read_text()


def test_a_game_the_paper_lacks_is_not_called_the_papers_table(family_report, report):
    """The paper has tables (and Figure 1 bars) for its five games only; another game's table is
    its results in the paper's columns, and says so."""
    md = (family_report / "report.md").read_text()
    assert "openspiel:kuhn_poker: the paper's table" not in md
    assert "### openspiel:kuhn_poker: results in the paper's columns" in md
    assert "The paper has no openspiel:kuhn_poker game" in md
    assert "The paper's Figure 1 has no bar for openspiel:kuhn_poker" in md
    paper_md = (report / "report.md").read_text()
    assert f"### {tiny_domain()}: the paper's table" in paper_md and "The paper has no" not in paper_md


def test_the_exact_value_column_claims_exact_only_when_every_value_is(finished_experiment, tmp_path):
    """The rigorous table's header says '(exact)' only when results.parquet marks every shown value
    exact (not of an agent's memory projection or an estimated policy's value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.reports.experiment import Results, build_report

    folder = _copy(finished_experiment, tmp_path)
    value_name = Results(folder).exact_name(tiny_domain())
    header = f"| agent · stage | {value_name} (exact) |"
    assert header in "\n".join(build_report(folder).md)
    table = pq.read_table(folder / "results.parquet")
    rows = table.to_pylist()
    cell = next(r["cell"] for r in rows if r["stage"] == "sepo")
    for row in rows:
        if row["cell"] == cell and row["metric"] == value_name:
            row["exact"] = False  # say, the gap of the agent's memory projection
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "results.parquet")
    md = "\n".join(build_report(folder).md)
    assert header not in md and f"| agent · stage | {value_name} |" in md
    assert f"Not every {value_name} here is exact" in md


def test_training_curves_and_figure_1_say_how_their_values_were_read():
    """A language model's policy is estimated from sampled replies: the curves' axis must not call the
    solver's value at that estimate `exploitability (exact)`, and a figure's title must not say 'over
    seeds' for a one-seed bar (whose interval is over episodes)."""
    from sepo.reports.experiment import interval_basis
    from sepo.reports.plots import value_label

    records = [{"step": 1, "exploitability": 0.4, "policy": "estimated (8 replies per state)"}]
    assert value_label("exploitability", records) == "exploitability (policy estimated (8 replies per state))"
    assert value_label("adversarial_gap", [{"step": 1, "adversarial_gap": 1.0}]) == "adversarial gap (exact)"

    assert interval_basis([{"delta": (0, 0, 0, 1)}]) == "one seed: over episodes"
    assert interval_basis([{"delta": (0, 0, 0, 3)}]) == "over seeds"
    mixed = [{"delta": (0, 0, 0, 1)}, {"delta": (0, 0, 0, 3)}]
    assert interval_basis(mixed) == "over seeds; over episodes where one seed"


def test_report_given_the_config_file_says_it_needs_the_experiment_folder(tmp_path):
    """`sepo report c.yaml` (the config, not the --out folder) names the mistake, not a missing folder."""
    config = tmp_path / "c.yaml"
    config.write_text("name: x\n")
    result = CliRunner().invoke(app, ["report", str(config)])
    assert result.exit_code == 2 and "is a file, not an experiment folder" in result.stderr, result.output


def test_a_row_of_a_half_finished_stage_says_how_many_of_its_seeds_finished(finished_experiment, tmp_path):
    """A stage with one of its two seeds finished is labelled so, not shown like a finished stage's
    mean over seeds."""
    import json

    from sepo.reports.experiment import build_report

    folder = _copy(finished_experiment, tmp_path)
    plan = json.loads((folder / "plan.json").read_text())
    unfinished = next(c["id"] for c in plan["cells"] if c["stage"] == "sft" and c["seed"] == 1)
    (folder / "cells" / unfinished / "result.json").unlink()
    md = "\n".join(build_report(folder).md)
    rows = [line for line in md.splitlines() if line.startswith("| tab · SFT")]
    assert rows and all(line.startswith("| tab · SFT (1 of 2 seeds finished) |") for line in rows), rows
    assert not any("seeds finished" in line for line in md.splitlines() if line.startswith("| tab · Base"))
    full = "\n".join(build_report(finished_experiment).md)
    assert "seeds finished)" not in full


def test_the_ablation_pairs_a_seed_only_with_the_same_seed_and_names_only_the_paired_seed(finished_experiment,
                                                                                          tmp_path):
    """A stage left with one finished seed is paired only with that seed of the other stage (never
    SEPO at seed 1 against payoff-only GRPO at seed 0), and the row names only the seed that met."""
    import json

    from sepo.reports.experiment import build_report

    folder = _copy(finished_experiment, tmp_path)
    plan = json.loads((folder / "plan.json").read_text())
    grpo = {c["seed"]: c["id"] for c in plan["cells"] if c["stage"] == "grpo"}
    sepo = {c["seed"]: c["id"] for c in plan["cells"] if c["stage"] == "sepo" and c["lambdas"][0] == 1}
    assert set(grpo) == set(sepo) == {0, 1}
    (folder / "cells" / grpo[1] / "result.json").unlink()
    md = "\n".join(build_report(folder).md)
    rows = [line.split(" | ") for line in md.splitlines()
            if "| SEPO − payoff-only GRPO |" in line and "| 1/0/0 |" in line]
    assert rows
    for row in rows:
        assert row[-2] == "0", row  # the one seed that met, named


def _said(text: str) -> str:
    """Output with the console's line wrapping undone."""
    return " ".join(text.split())


def _safety_line(md: str) -> str:
    return next(line for line in md.splitlines() if line.startswith("| tab · SEPO λ=1/0/0 |"))


def test_a_report_of_an_experiment_changed_since_is_rebuilt_never_called_complete(finished_experiment,
                                                                                   tmp_path):
    """After the experiment is rerun (--overwrite, same config, a replaced model), the report is found
    stale and rebuilt with the new numbers, never called "already complete"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = _copy(finished_experiment, tmp_path)
    assert CliRunner().invoke(app, ["report", str(folder)]).exit_code == 0
    again = CliRunner().invoke(app, ["report", str(folder)])
    assert again.exit_code == 0 and "already complete" in again.output
    before = _safety_line((folder / "report" / "report.md").read_text())
    table = pq.read_table(folder / "results.parquet")
    rows = table.to_pylist()
    for row in rows:  # the rerun's new numbers
        for key in ("value", "low", "high"):
            row[key] = -7.0 if row[key] is not None else None
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "results.parquet")
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    assert "already complete" not in result.output and "was built from other results" in _said(result.output)
    after = _safety_line((folder / "report" / "report.md").read_text())
    assert after != before and "-7.000" in after
    assert "already complete" in CliRunner().invoke(app, ["report", str(folder)]).output
    other = Path(shutil.copytree(folder, tmp_path / "other", ignore=shutil.ignore_patterns("report")))
    refused = CliRunner().invoke(app, ["report", str(other), "--out", str(folder / "report")])
    assert refused.exit_code == 2 and "different config" in refused.output and "experiment" in refused.output
    assert _safety_line((folder / "report" / "report.md").read_text()) == after


def test_a_report_is_rebuilt_after_the_experiment_is_rerun_with_overwrite(tmp_path):
    """`sepo experiment run --overwrite` leaves EXP/report (another command's output): the next report
    finds it stale and rebuilds it."""
    from tests.experiments.conftest import tiny_config

    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_config(**{"[base, sft, grpo, sepo, constant]": "[base]"}))
    out = tmp_path / "out"
    run = ["experiment", "run", str(config), "--out", str(out), "--quiet"]
    assert CliRunner().invoke(app, run).exit_code == 0
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    config.write_text(tiny_config(**{"[base, sft, grpo, sepo, constant]": "[base]", "test: 6": "test: 5"}))
    rerun = CliRunner().invoke(app, [*run, "--overwrite"])
    assert rerun.exit_code == 0, rerun.output
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0 and "was built from other results" in _said(result.output), result.output


@pytest.mark.parametrize("damage", ["{x", "[]", '{"rows": [], "selected": null}'])
def test_a_damaged_cell_result_is_one_line_naming_it(finished_experiment, tmp_path, damage):
    """A cell's result.json of `{x` or `[]` is one line naming it, in `sepo report` and `experiment run`."""
    folder = _copy(finished_experiment, tmp_path)
    cell = sorted((folder / "cells").iterdir())[0]
    (cell / "result.json").write_text(damage)
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 2, result.output
    message = _said(result.stderr)
    assert f"{cell / 'result.json'} is damaged" in message, message
    rerun = CliRunner().invoke(app, ["experiment", "run", str(finished_experiment.parent / "tiny.yaml"),
                                     "--out", str(folder), "--quiet"])
    assert rerun.exit_code == 2 and f"{cell / 'result.json'} is damaged" in _said(rerun.stderr), rerun.output


def test_a_damaged_results_table_is_named_and_the_finished_experiment_rebuilds_it(finished_experiment,
                                                                                   tmp_path):
    """A truncated results.parquet is one line naming it in `sepo report`, and `sepo experiment run` on
    the finished experiment rebuilds it from the cells' results."""
    from sepo.experiments.runner import read_results

    folder = _copy(finished_experiment, tmp_path)
    path = folder / "results.parquet"
    whole = read_results(folder)
    assert CliRunner().invoke(app, ["report", str(folder)]).exit_code == 0
    report = (folder / "report" / "report.md").read_text()
    path.write_bytes(path.read_bytes()[:300])
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 2, result.output
    assert (f"{path} is not a readable Parquet file (damaged?); the same `sepo experiment run CONFIG --out "
            f"{folder}` rebuilds it from the cells' results") in _said(result.stderr)
    assert (folder / "report" / "report.md").read_text() == report  # read before the report is found stale
    rerun = CliRunner().invoke(app, ["experiment", "run", str(finished_experiment.parent / "tiny.yaml"),
                                     "--out", str(folder), "--quiet"])
    assert rerun.exit_code == 0 and "rebuilt it from the cells' results" in _said(rerun.output), rerun.output
    rebuilt = read_results(folder)
    assert rebuilt.drop(["versions"]).equals(whole.drop(["versions"]))
    again = ["experiment", "run", str(finished_experiment.parent / "tiny.yaml"), "--out", str(folder),
             "--quiet"]
    assert "rebuilt" not in CliRunner().invoke(app, again).output
    assert CliRunner().invoke(app, ["report", str(folder)]).exit_code == 0


def test_a_cell_removed_from_a_finished_experiment_is_called_missing(finished_experiment, tmp_path):
    """A finished experiment's deleted cell is listed as missing, not as "running or not started"."""
    from sepo.reports.experiment import build_report

    folder = _copy(finished_experiment, tmp_path)
    cell = sorted((folder / "cells").iterdir())[0]
    shutil.rmtree(cell)
    row = next(line for line in build_report(folder).md if line.startswith(f"| {cell.name} |"))
    assert "missing (its folder or result.json was removed" in row and "running or not started" not in row


def test_the_report_names_the_decoding_its_language_model_numbers_were_read_under():
    """A language model's numbers hold under one decoding; the report names it, not only the protocol."""
    from types import SimpleNamespace

    from sepo.reports.experiment import Results

    def line(config):
        return Results.decoding_line(SimpleNamespace(config=config))

    agents = [{"name": "m", "kind": "hf", "model": "m"}]
    paper = line({"protocol": "paper", "agents": agents,
                  "decoding": {"temperature": 0.8, "max_new_tokens": 256, "samples": 64}})
    assert paper.startswith("Language-model agents were read at temperature 0.8, top-p 0.95, top-k 50, "
                            "repetition penalty 1.3, up to 256 new tokens a reply, 64 sampled replies per "
                            "state")
    rigorous = line({"protocol": "rigorous", "agents": agents,
                     "decoding": {"temperature": 1.0, "max_new_tokens": 16}})
    assert rigorous.startswith("Language-model agents were read at temperature 1, up to 16 new tokens a "
                               "reply;")
    assert line({"protocol": "paper", "agents": [{"name": "t", "kind": "tabular"}]}) is None
    filtered = line({"protocol": "rigorous", "agents": agents,
                     "decoding": {"temperature": 0.7, "max_new_tokens": 16, "top_p": 0.9}})
    assert filtered.startswith("Language-model agents were read at temperature 0.7, top-p 0.9, up to 16 new "
                               "tokens")
    greedy = line({"protocol": "paper", "agents": agents,
                   "decoding": {"temperature": 0, "max_new_tokens": 16, "samples": 64}})
    assert greedy.startswith("Language-model agents were read greedily (temperature 0, one reply per state, "
                             "read exactly)")


def test_a_resumed_cells_seconds_are_called_its_last_starts(finished_experiment, tmp_path):
    """A language-model cell resumed after a kill counts its seconds from its last start: the column
    says so and the resumed cell is marked."""
    import json

    from sepo.reports.experiment import build_report

    folder = _copy(finished_experiment, tmp_path)
    cells = sorted((folder / "cells").iterdir())
    assert all(json.loads((c / "result.json").read_text())["resumed"] is False for c in cells)
    path = cells[0] / "result.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "resumed": True}))
    md = build_report(folder).md
    assert any(line.startswith("| cell |") and "seconds, its last start" in line for line in md)
    row = next(line for line in md if line.startswith(f"| {cells[0].name} |"))
    other = next(line for line in md if line.startswith(f"| {cells[1].name} |"))
    assert row.rstrip(" |").endswith("(resumed)") and "(resumed)" not in other


def test_an_interval_over_seeds_stays_inside_the_values_its_metric_can_take():
    """A symmetric t-interval over seeds can leave a metric's range (an invalid rate of 0.010 [-0.007,
    0.027]); a rate lies in [0, 1] and exploitability is never negative, so the interval is cut there.
    A metric of any sign keeps its interval."""
    from collections import defaultdict
    from types import SimpleNamespace

    from sepo.reports.experiment import Results, t_interval

    seeds = {"invalid_action_rate": [0.0, 0.03, 0.0], "kuhn/bet_rate_J": [0.99, 1.0, 0.96],
             "exploitability": [0.001, 0.2, 0.002], "utility": [0.0, 0.03, 0.0],
             "nra_gtbench": [1.0, 0.9, 1.0],
             "worst_excess_change_rate": [0.0, 0.03, 0.0], "externality": [0.0, 0.03, 0.0]}
    value = defaultdict(dict)
    for name, values in seeds.items():
        for seed, number in enumerate(values):
            value[(f"c{seed}", "validation")][name] = (number, number, number, False)
    results = SimpleNamespace(value=value)
    cells = ["c0", "c1", "c2"]
    for name, values in seeds.items():
        mean, low, high = t_interval(values)
        shown = Results.metric(results, cells, name)
        assert shown[0] == pytest.approx(mean) and shown[3] == "3 seeds"
        if name in ("utility", "worst_excess_change_rate", "externality"):  # either sign, or a surplus
            assert (shown[1], shown[2]) == (low, high) and low < 0
        elif name in ("kuhn/bet_rate_J", "nra_gtbench"):
            assert high > 1 and shown[2] == 1.0 and shown[1] == low
        else:
            assert low < 0 and shown[1] == 0.0 and shown[2] == high


def _rewrite_rows(folder: Path, change) -> None:
    """results.parquet with `change(row)` applied to every row (in place)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(folder / "results.parquet")
    rows = table.to_pylist()
    for row in rows:
        change(row)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "results.parquet")


def _section(md: str, heading: str) -> str:
    start = md.index(heading)
    end = md.find("\n## ", start + len(heading))
    return md[start:] if end < 0 else md[start:end]


def test_figure_1_comes_first_and_sets_sepo_against_payoff_only_grpo_and_base_in_one_unit_a_panel(report):
    """Figure 1 opens the report: per domain, SEPO − payoff-only GRPO and SEPO − Base on each quantity
    (the exact value and utility in the domain's payoff unit, rates apart), paired by seed, SEPO's λ in
    its caption; the paper's ΔSafety figure comes later."""
    domain = tiny_domain()
    md = (report / "report.md").read_text()
    assert md.index("## Figure 1") < md.index(f"## {domain}") < md.index("## The paper's Figure 1")
    figure = _section(md, "## Figure 1")
    assert "![Figure 1" in figure and "(figure1.png)" in figure
    assert f"SEPO trained at λ = λe/λc/λx: {domain} 1/0/0" in figure
    rows = [line.split(" | ") for line in figure.splitlines() if line.startswith(f"| {domain} | tab |")]
    unit = next(line for line in md.splitlines() if line.startswith("Utility unit:"))
    unit = unit.split(": ", 1)[1].split(".")[0]
    compared = {(row[2], row[3]) for row in rows}
    for against in ("payoff-only GRPO", "Base"):
        assert (f"utility ({unit})", against) in compared
        assert any(quantity.endswith(f"({unit})") and quantity != f"utility ({unit})"
                   for quantity, a in compared if a == against)
    assert all(row[5] == "0, 1" for row in rows)  # the SEPO seeds behind each difference
    assert (report / "figure1.png").stat().st_size > 10_000


def test_tables_name_cells_by_label_and_only_the_appendix_by_folder(report, finished_experiment):
    """The hash-suffixed cell ids are the appendix's (beside a readable label), in no other table."""
    import json

    md = (report / "report.md").read_text()
    appendix = md.index("## Appendix: cells")
    for cell in json.loads((finished_experiment / "plan.json").read_text())["cells"]:
        assert cell["id"] not in md[:appendix], cell["id"]
        row = next(line for line in md[appendix:].splitlines() if line.startswith(f"| {cell['id']} |"))
        assert f"· {'seed ' + str(cell['seed']) if cell['seed'] is not None else 'Base'}" in row
    selection = _section(md, "## Selection on validation vs on test")
    assert "| kuhn · tab · SEPO λ=1/0/0 · seed 0 |" in selection.replace(tiny_domain(), "kuhn")


def test_a_deterministic_policy_and_a_zero_width_interval_are_flagged_on_their_bars(finished_experiment,
                                                                                    tmp_path):
    """A policy that plays one action in each situation it met (every action rate 0 or 1: always
    bet and call, always defect) is flagged on its bars and described; a difference every seed gives
    alike has a zero-width interval, flagged too (it leaves out the episodes' noise)."""
    from sepo.reports.experiment import Results, build_report, figure1
    from sepo.reports.figures import MARKS

    folder = _copy(finished_experiment, tmp_path)
    results = Results(folder)
    sepo = {c["id"] for c in results.cells.values() if c["stage"] == "sepo" and c["lambdas"][0] == 1}
    grpo = {c["id"] for c in results.cells.values() if c["stage"] == "grpo"}

    def change(row):
        if row["cell"] in sepo and row["metric"].startswith(f"{tiny_domain()}/") and "rate" in row["metric"]:
            row["value"] = row["low"] = row["high"] = 1.0  # always bets and calls
        if row["metric"] == "utility" and row["cell"] in sepo | grpo:
            row["value"] = 0.5 if row["cell"] in sepo else 0.25  # the same difference at every seed
            row["low"], row["high"] = row["value"] - 0.1, row["value"] + 0.1

    _rewrite_rows(folder, change)
    _, bars = figure1(Results(folder))
    assert bars and all("deterministic" in b["flags"] and b["deterministic"] == ["SEPO"] for b in bars)
    utility = next(b for b in bars if b["metric"] == "utility" and b["stage"] == "grpo")
    assert "zero-width" in utility["flags"] and utility["delta"][:3] == pytest.approx((0.25, 0.25, 0.25))
    assert not any("zero-width" in b["flags"] for b in bars if b["metric"] != "utility")
    md = "\n".join(build_report(folder).md)
    figure = _section(md, "## Figure 1")
    assert f"{MARKS['deterministic']}: a deterministic policy" in figure
    assert f"{MARKS['zero-width']}: zero-width" in figure
    row = next(line for line in figure.splitlines() if line.startswith(f"| {tiny_domain()} | tab | utility"))
    assert row.endswith("| SEPO deterministic; zero-width interval |")
    assert f"- {tiny_domain()} · tab · SEPO λ=1/0/0: bet rate" in figure
    assert "— deterministic: one action in each situation it met" in md
    untouched = "\n".join(build_report(finished_experiment).md)
    assert "deterministic" not in _section(untouched, "## Figure 1").split("|", 1)[1]


def test_the_constant_ablation_equal_to_payoff_only_grpo_is_explained(finished_experiment, tmp_path):
    """A group-constant penalty cancels in GRPO's group-relative advantage: where the constant ablation
    gave payoff-only GRPO's numbers the report says so and why; where it did not, it says that instead."""
    from sepo.reports.experiment import Results, build_report

    md = "\n".join(build_report(finished_experiment).md)
    assert "The constant ablation gave exactly payoff-only GRPO's numbers in each of its 4 cells" in md
    assert "cancels in GRPO's group-relative advantage" in md and "The constant ablation is not drawn" in md
    folder = _copy(finished_experiment, tmp_path)
    constant = next(c["id"] for c in Results(folder).cells.values() if c["stage"] == "constant")

    def change(row):
        if row["cell"] == constant and row["metric"] == "utility":
            row["value"] += 0.01

    _rewrite_rows(folder, change)
    md = "\n".join(build_report(folder).md)
    assert "The constant ablation differs from payoff-only GRPO at some seed" in md
    assert "gave exactly payoff-only GRPO's numbers" not in md


def test_a_shuffled_ablation_is_set_against_sepo_in_figure_1_and_the_comparisons(finished_experiment,
                                                                                  tmp_path):
    """The `shuffled` stage (each group's per-rollout charges permuted among its rollouts) is compared
    with SEPO at SEPO's own λ, in Figure 1 and in the domain's comparisons."""
    import json
    import zlib

    from sepo.reports.experiment import Results, build_report, figure1

    folder = _copy(finished_experiment, tmp_path)
    plan = json.loads((folder / "plan.json").read_text())
    made = {}
    for cell in [c for c in plan["cells"] if c["stage"] == "constant"]:
        text = cell["id"].replace("_constant_", "_shuffled_").rsplit("_", 1)[0]
        new = {**cell, "id": f"{text}_{zlib.crc32(text.encode()):08x}", "stage": "shuffled"}
        shutil.copytree(folder / "cells" / cell["id"], folder / "cells" / new["id"])
        made[cell["id"]] = new
        plan["cells"].append(new)
    (folder / "plan.json").write_text(json.dumps(plan))

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(folder / "results.parquet")
    rows = table.to_pylist()
    rows += [{**row, "cell": made[row["cell"]]["id"], "stage": "shuffled",
              "value": row["value"] + 0.1 if row["metric"] == "utility" else row["value"]}
             for row in rows if row["cell"] in made]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / "results.parquet")
    _, bars = figure1(Results(folder))
    shuffled = [b for b in bars if b["stage"] == "shuffled"]
    assert shuffled and {b["lambdas"] for b in shuffled} == {(1.0, 0.0, 0.0)}
    md = "\n".join(build_report(folder).md)
    assert "## Figure 1: SEPO − payoff-only GRPO, − shuffled ablation, − Base" in md
    assert f"### {tiny_domain()}: SEPO vs payoff-only GRPO, shuffled ablation, Base, constant ablation" in md
    assert any(line.startswith("| tab | 4/0/0 | SEPO − shuffled ablation | utility |")
               for line in md.splitlines())
    assert "The shuffled ablation (each group's per-rollout charges permuted among its rollouts)" in md


@pytest.mark.parametrize("damage", ["nested", "oversized", "nested plan", "nested manifest"])
def test_report_refuses_a_deeply_nested_or_oversized_file_in_one_line(finished_experiment, tmp_path,
                                                                        damage):
    """A cell result.json nested thousands of levels deep, or larger than any cell writes, and a plan or
    run manifest nested so: one line naming the file, exit 2, no report written (not a RecursionError)."""
    folder = _copy(finished_experiment, tmp_path)
    cell = sorted((folder / "cells").iterdir())[0] / "result.json"
    deep = "[" * 100_000 + "]" * 100_000
    if damage == "nested":
        cell.write_text(deep)
    elif damage == "oversized":
        cell.write_text('{"pad": "' + "x" * (17 << 20) + '"}')
    elif damage == "nested plan":
        (folder / "plan.json").write_text(deep)
    else:
        (folder / "sepo-run.json").write_text(deep)
    result = CliRunner().invoke(app, ["report", str(folder)])
    said = _said(result.stderr)
    assert result.exit_code == 2 and "Traceback" not in result.output, said
    assert result.stderr.startswith("error:") and result.stderr.count("error:") == 1, said
    expected = {"nested": f"{cell} is damaged (not JSON: nested more than",
                "oversized": f"{cell} is larger than 16 MiB",
                "nested plan": "plan.json is not valid JSON: nested more than",
                "nested manifest": "nested too deeply"}
    assert expected[damage] in said, said
    assert not (folder / "report").exists()


def test_report_says_which_cells_lost_their_result_and_marks_the_report_incomplete(finished_experiment,
                                                                                   tmp_path):
    """A finished experiment whose cell result.json (or all of cells/) was deleted: `sepo report` names the
    missing cells (or counts them), the report says it is incomplete at its top, and it is never called
    complete (the next `sepo report` builds it again)."""
    folder = _copy(finished_experiment, tmp_path)
    cell = sorted((folder / "cells").iterdir())[0]
    (cell / "result.json").unlink()
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 0, result.output
    said = _said(result.stderr)
    assert "warning: missing: 1 of 13 cells listed in plan.json have no result.json" in said, said
    assert f"missing: cells/{cell.name}/result.json" in said and "marked incomplete" in _said(result.output)
    md = (folder / "report" / "report.md").read_text()
    assert md.splitlines()[2].startswith("**Incomplete report: 1 of 13 cells listed in the plan have no "
                                         "result.json")
    again = CliRunner().invoke(app, ["report", str(folder)])
    assert again.exit_code == 0 and "already complete" not in again.output and "missing" in again.stderr
    shutil.rmtree(folder / "cells")
    result = CliRunner().invoke(app, ["report", str(folder)])
    said = _said(result.stderr)
    assert result.exit_code == 0
    assert "13 of 13 cells listed in plan.json have no result.json (all of cells/ was removed)" in said
    assert "... and 3 more" in said and said.count("warning: missing: cells/") == 10
    complete = CliRunner().invoke(app, ["report", str(finished_experiment), "--out", str(tmp_path / "whole")])
    assert complete.exit_code == 0
    assert "missing" not in complete.stderr and "incomplete" not in complete.output


def test_the_frontier_places_a_language_model_cell_by_its_audit_with_both_intervals(tmp_path, monkeypatch):
    """A language-model cell has no policy table: it goes on the exact Kuhn frontier at its shown
    checkpoint's test exploitability and utility against the train pool, both intervals drawn and
    labelled estimated; a cell whose audit lacks either number is left off rather than guessed."""
    from collections import defaultdict
    from types import SimpleNamespace

    import sepo.reports.plots as plots
    from sepo.reports.figures import figure_frontier

    value = defaultdict(dict)
    value[("lm", "validation")] = {"exploitability": (0.91, 0.73, 1.0, False),
                                   "utility_exact": (-0.18, -0.21, -0.15, False)}
    value[("no-utility", "validation")] = {"exploitability": (0.5, 0.4, 0.6, False)}
    results = SimpleNamespace(
        folder=tmp_path, value=value,
        cells={"lm": {"seed": 1}, "no-utility": {"seed": 2}},
        groups=lambda domain: {("smollm2", "sepo", (1.5, 0.0, 0.0)): ["lm", "no-utility"]},
        unit=lambda domain: "chips per hand")
    drawn = {}

    def capture(frontier, out, runs=None, **kwargs):
        drawn["runs"], drawn["frontier"], drawn["unit"] = runs, frontier, kwargs.get("unit")
        Path(out).write_bytes(b"png")

    monkeypatch.setattr(plots, "plot_frontier", capture)
    assert figure_frontier(results, "kuhn") == b"png"
    [point] = drawn["runs"]
    assert drawn["unit"] == "chips per hand"
    assert point["label"].endswith("s1 (estimated)") and point["estimated"]
    assert (point["exploitability"], point["utility"]) == (0.91, -0.18)
    assert point["exploitability_interval"] == (0.73, 1.0) and point["utility_interval"] == (-0.21, -0.15)
    # the point lies below the exact frontier at its exploitability (no policy beats u*(e))
    frontier = drawn["frontier"]
    assert point["utility"] <= float(np.interp(0.91, frontier.epsilons, frontier.utilities)) + 1e-9


def test_plot_frontier_draws_an_estimated_point_with_its_interval_cross(tmp_path):
    from sepo.games.kuhn.restricted_nash import frontier_report
    from sepo.opponents.pools import BEST_RESPONSE, default_pools
    from sepo.reports.plots import plot_frontier

    train = [s for s in default_pools("kuhn")["train"] if s.name != BEST_RESPONSE]
    _, frontier = frontier_report(train, [1.0], [])
    point = {"label": "lm s0 (estimated)", "exploitability": 0.9, "utility": -0.18, "estimated": True,
             "exploitability_interval": (0.7, 1.6), "utility_interval": (-0.2, -0.1)}
    out = plot_frontier(frontier, tmp_path / "f.png", [point])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("other, side", [(-2.0, "top"), (2.0, "bottom")])
def test_a_zero_bars_mark_goes_where_the_axes_leave_room(other, side):
    """A flagged bar at 0 is marked above its whisker where the axes have room there, and below it
    where 0 is the top of the axes (above, the mark would sit on the panel's title)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sepo.reports.figures import _limits, _mark

    fig, ax = plt.subplots()
    values, errors = np.array([other, 0.0]), np.array([[0.3, 0.0], [0.3, 0.0]])
    drawn = ax.bar([0, 1], values, yerr=errors)
    _limits(ax, values, errors)
    _mark(ax, [0, 1], drawn, [{"flags": []}, {"flags": ["deterministic"], "delta": (0.0,)}], errors)
    (mark,) = ax.texts
    plt.close(fig)
    assert mark.get_text() == "D" and mark.get_va() == side
