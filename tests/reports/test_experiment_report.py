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
from tests.experiments.conftest import finished_experiment, tiny_domain  # noqa: F401 (the fixture)

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


@pytest.fixture(scope="module")
def report(finished_experiment):  # noqa: F811
    result = CliRunner().invoke(app, ["report", str(finished_experiment)])
    assert result.exit_code == 0, result.output
    return finished_experiment / "report"


def test_the_report_has_the_papers_table_figure_1_the_ablation_and_the_figures(report):
    domain = tiny_domain()
    md = (report / "report.md").read_text()
    assert f"## {domain}" in md and "| agent · stage | Pay/r | Exploit | Robust | Ext | Safety | NRA | cells |" in md
    for row in ("tab · Base", "tab · SFT", "tab · SEPO λ=1/0/0", "tab · payoff-only GRPO", "tab · constant ablation λ=4/0/0"):
        assert f"| {row} |" in md
    assert "## Figure 1: ΔSafety = SEPO − Base" in md and "SEPO − constant ablation" in md
    assert "held-out selection" in md and "chosen on validation" in md
    html = (report / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) >= 3 and 'src="http' not in html  # self-contained
    assert f'id="table-{domain}"' in html and 'id="table-figure-1"' in html


def test_every_row_names_the_cells_behind_its_numbers(report, finished_experiment):  # noqa: F811
    import json

    md = (report / "report.md").read_text()
    plan = json.loads((finished_experiment / "plan.json").read_text())
    for cell in plan["cells"]:
        assert cell["id"] in md


def test_the_papers_numbers_are_data_for_registered_names():
    published = paper_numbers()
    assert published["columns"] == ["utility", "exploit_pool", "robustness", "externality", "safety", "nra"]
    for domain, entry in published["domains"].items():
        assert set(entry["rows"]) == {"base", "sft", "sepo"} and all(len(v) == 6 for v in entry["rows"].values())


def test_report_refuses_a_folder_that_is_no_experiment(tmp_path):
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "not the output of `sepo experiment run`" in result.output


def _chromium(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed (apt-get install chromium)")
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
    matplotlib_blue = (np.abs(pixels - np.array([31, 119, 180])).sum(-1) <= 30).mean()  # plotted lines and bars
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
    config.write_text(tiny_config(**{"name: tiny": "name: tiny\nprotocol: paper", "[base, sft, grpo, sepo, constant]": "[base]"}))
    run_experiment(config, tmp_path / "out")
    md = "\n".join(build_report(tmp_path / "out").md)
    published = paper_numbers()["domains"][domain]["rows"]
    assert "| tab · Base |" in md
    line = next(l for l in md.splitlines() if l.startswith("| paper · Base |"))
    assert f"{published['base'][4]:.3f}" in line  # the published safety
    assert "| paper · SEPO |" in md


def test_cells_whose_replies_do_not_parse_are_marked_in_every_table_and_hatched_in_figure_1(finished_experiment, tmp_path):  # noqa: F811
    """Issue 16: the smoke's tiny-model cells (invalid rate 1.000) read as results, Figure 1 drawing
    their ΔSafety as an improvement. A cell whose invalid rate exceeds the stated limit is marked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.reports.experiment import INVALID_LIMIT, UNPARSED, Results, build_report, figure_delta_safety

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
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
    marked = [line for line in md.splitlines() if UNPARSED in line and line.startswith("|")]
    assert any(failing in line for line in marked)  # the paper table's row of that cell
    assert not any(cell in line for line in marked for cell in sepo_cells[1:] if failing not in line)
    assert f"{UNPARSED} replies that do not parse" in md and "Hatched grey bars" in md
    _, bars = figure_delta_safety(Results(folder))
    assert [b["unparsed"] for b in bars] == [failing in b["cells"] for b in bars] and any(b["unparsed"] for b in bars)


def test_figure_1_says_why_a_domain_with_base_and_sepo_has_no_bar(finished_experiment, tmp_path):  # noqa: F811
    """A domain whose safety is not measured (OpenSpiel's Leduc under the paper protocol: no pools)
    had no bar and no word about it; alone, the report claimed no Base and SEPO cells had finished."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.reports.experiment import build_report

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
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


def test_the_exact_value_column_claims_exact_only_when_every_value_is(finished_experiment, tmp_path):  # noqa: F811
    """The rigorous table's header said '(exact)' whatever its values were (an agent's memory
    projection, an estimated policy's value). It says so only when results.parquet marks every
    shown value exact."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sepo.reports.experiment import Results, build_report

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
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
    assert header not in md and f"| agent · stage | {value_name} |" in md and f"Not every {value_name} here is exact" in md


def test_training_curves_and_figure_1_say_how_their_values_were_read():
    """A language model's policy is estimated from sampled replies: the curves' axis called the
    solver's value at that estimate `exploitability (exact)`, and Figure 1's title said 'over
    seeds' for a one-seed bar (whose interval is over episodes)."""
    from sepo.reports.experiment import interval_basis
    from sepo.reports.plots import value_label

    records = [{"step": 1, "exploitability": 0.4, "policy": "estimated (8 replies per state)"}]
    assert value_label("exploitability", records) == "exploitability (policy estimated (8 replies per state))"
    assert value_label("adversarial_gap", [{"step": 1, "adversarial_gap": 1.0}]) == "adversarial gap (exact)"

    assert interval_basis([{"delta": (0, 0, 0, 1)}]) == "one seed: over episodes"
    assert interval_basis([{"delta": (0, 0, 0, 3)}]) == "over seeds"
    assert interval_basis([{"delta": (0, 0, 0, 1)}, {"delta": (0, 0, 0, 3)}]) == "over seeds; over episodes where one seed"


def test_report_given_the_config_file_says_it_needs_the_experiment_folder(tmp_path):
    """Found: `sepo report c.yaml` (the config, not the --out folder) said "experiment folder not
    found: c.yaml" of a file that exists."""
    config = tmp_path / "c.yaml"
    config.write_text("name: x\n")
    result = CliRunner().invoke(app, ["report", str(config)])
    assert result.exit_code == 2 and "is a file, not an experiment folder" in result.stderr, result.output


def test_a_row_of_a_half_finished_stage_says_how_many_of_its_seeds_finished(finished_experiment, tmp_path):  # noqa: F811
    """Found running `sepo report` on a half-finished experiment: a stage with one of its two seeds
    finished showed that seed's numbers under the stage's name, like a finished stage's mean over
    seeds (only the header's cell count said the run was incomplete)."""
    import json

    from sepo.reports.experiment import build_report

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
    plan = json.loads((folder / "plan.json").read_text())
    unfinished = next(c["id"] for c in plan["cells"] if c["stage"] == "sft" and c["seed"] == 1)
    (folder / "cells" / unfinished / "result.json").unlink()
    md = "\n".join(build_report(folder).md)
    rows = [line for line in md.splitlines() if line.startswith("| tab · SFT")]
    assert rows and all(line.startswith("| tab · SFT (1 of 2 seeds finished) |") for line in rows), rows
    assert not any("seeds finished" in line for line in md.splitlines() if line.startswith("| tab · Base"))
    full = "\n".join(build_report(finished_experiment).md)
    assert "seeds finished)" not in full


def test_the_ablation_pairs_a_seed_only_with_the_same_seed_and_names_only_the_paired_cells(finished_experiment, tmp_path):  # noqa: F811
    """Found running `sepo report` on the half-finished real-model experiment: the ablation row listed
    every cell of both stages, paired or not, and a stage left with one finished seed was paired with
    every seed of the other (SEPO at seed 1 against payoff-only GRPO at seed 0)."""
    import json

    from sepo.reports.experiment import build_report

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
    plan = json.loads((folder / "plan.json").read_text())
    grpo = {c["seed"]: c["id"] for c in plan["cells"] if c["stage"] == "grpo"}
    sepo = {c["seed"]: c["id"] for c in plan["cells"] if c["stage"] == "sepo" and c["lambdas"][0] == 1}
    assert set(grpo) == set(sepo) == {0, 1}
    (folder / "cells" / grpo[1] / "result.json").unlink()
    md = "\n".join(build_report(folder).md)
    rows = [line.split(" | ") for line in md.splitlines() if "| SEPO − payoff-only GRPO |" in line and "| 1/0/0 |" in line]
    assert rows
    for row in rows:
        seeds, cells = row[-2], row[-1].rstrip(" |").split(", ")
        assert seeds == "1" and sorted(cells) == sorted([sepo[0], grpo[0]]), row


def _said(text: str) -> str:
    """Output with the console's line wrapping undone."""
    return " ".join(text.split())


def _safety_line(md: str) -> str:
    return next(line for line in md.splitlines() if line.startswith("| tab · SEPO λ=1/0/0 |"))


def test_a_report_of_an_experiment_changed_since_is_rebuilt_never_called_complete(finished_experiment, tmp_path):  # noqa: F811
    """Found by a hostile review: after the experiment was rerun (--overwrite, same config, a replaced
    model), `sepo report` said "already complete (the experiment has not changed since)" and kept the old
    numbers: the report's identity was the experiment's path and config hash only."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
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
    assert CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quiet"]).exit_code == 0
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    config.write_text(tiny_config(**{"[base, sft, grpo, sepo, constant]": "[base]", "test: 6": "test: 5"}))
    rerun = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(out), "--quiet", "--overwrite"])
    assert rerun.exit_code == 0, rerun.output
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0 and "was built from other results" in _said(result.output), result.output


@pytest.mark.parametrize("damage", ["{x", "[]", '{"rows": [], "selected": null}'])
def test_a_damaged_cell_result_is_one_line_naming_it(finished_experiment, tmp_path, damage):  # noqa: F811
    """Found by a hostile review: a cell's result.json of `{x` or `[]` was a traceback in `sepo report`."""
    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
    cell = sorted((folder / "cells").iterdir())[0]
    (cell / "result.json").write_text(damage)
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 2, result.output
    message = _said(result.stderr)
    assert f"{cell / 'result.json'} is damaged" in message, message
    rerun = CliRunner().invoke(app, ["experiment", "run", str(finished_experiment.parent / "tiny.yaml"), "--out", str(folder),
                                     "--quiet"])
    assert rerun.exit_code == 2 and f"{cell / 'result.json'} is damaged" in _said(rerun.stderr), rerun.output


def test_a_damaged_results_table_is_named_and_the_finished_experiment_rebuilds_it(finished_experiment, tmp_path):  # noqa: F811
    """Found by a hostile review: a truncated results.parquet was pyarrow's traceback in `sepo report`, and
    `sepo experiment run` on the finished experiment still said "results in EXP/results.parquet"."""
    from sepo.experiments.runner import read_results

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
    path = folder / "results.parquet"
    whole = read_results(folder)
    assert CliRunner().invoke(app, ["report", str(folder)]).exit_code == 0
    report = (folder / "report" / "report.md").read_text()
    path.write_bytes(path.read_bytes()[:300])
    result = CliRunner().invoke(app, ["report", str(folder)])
    assert result.exit_code == 2, result.output
    assert f"{path} is not a readable Parquet file (damaged?); the same `sepo experiment run CONFIG --out {folder}` " \
           "rebuilds it from the cells' results" in _said(result.stderr)
    assert (folder / "report" / "report.md").read_text() == report  # read before the report is found stale
    rerun = CliRunner().invoke(app, ["experiment", "run", str(finished_experiment.parent / "tiny.yaml"), "--out", str(folder),
                                     "--quiet"])
    assert rerun.exit_code == 0 and "rebuilt it from the cells' results" in _said(rerun.output), rerun.output
    rebuilt = read_results(folder)
    assert rebuilt.drop(["versions"]).equals(whole.drop(["versions"]))
    assert "rebuilt" not in CliRunner().invoke(app, ["experiment", "run", str(finished_experiment.parent / "tiny.yaml"),
                                                     "--out", str(folder), "--quiet"]).output
    assert CliRunner().invoke(app, ["report", str(folder)]).exit_code == 0


def test_a_cell_removed_from_a_finished_experiment_is_called_missing(finished_experiment, tmp_path):  # noqa: F811
    """Found by a hostile review: a finished experiment's deleted cell was listed as "running or not started"."""
    from sepo.reports.experiment import build_report

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
    cell = sorted((folder / "cells").iterdir())[0]
    shutil.rmtree(cell)
    row = next(line for line in build_report(folder).md if line.startswith(f"| {cell.name} |"))
    assert "missing (its folder or result.json was removed" in row and "running or not started" not in row


def test_the_report_names_the_decoding_its_language_model_numbers_were_read_under():
    """A language model's numbers hold under one decoding; the report said only the protocol."""
    from types import SimpleNamespace

    from sepo.reports.experiment import Results

    def line(config):
        return Results.decoding_line(SimpleNamespace(config=config))

    agents = [{"name": "m", "kind": "hf", "model": "m"}]
    paper = line({"protocol": "paper", "agents": agents, "decoding": {"temperature": 0.8, "max_new_tokens": 256, "samples": 64}})
    assert paper.startswith("Language-model agents were read at temperature 0.8, top-p 0.95, top-k 50, repetition penalty 1.3, "
                            "up to 256 new tokens a reply, 64 sampled replies per state")
    rigorous = line({"protocol": "rigorous", "agents": agents, "decoding": {"temperature": 1.0, "max_new_tokens": 16}})
    assert rigorous.startswith("Language-model agents were read at temperature 1, up to 16 new tokens a reply;")
    assert line({"protocol": "paper", "agents": [{"name": "t", "kind": "tabular"}]}) is None
    filtered = line({"protocol": "rigorous", "agents": agents, "decoding": {"temperature": 0.7, "max_new_tokens": 16, "top_p": 0.9}})
    assert filtered.startswith("Language-model agents were read at temperature 0.7, top-p 0.9, up to 16 new tokens")
    greedy = line({"protocol": "paper", "agents": agents, "decoding": {"temperature": 0, "max_new_tokens": 16, "samples": 64}})
    assert greedy.startswith("Language-model agents were read greedily (temperature 0, one reply per state, read exactly)")


def test_a_resumed_cells_seconds_are_called_its_last_starts(finished_experiment, tmp_path):  # noqa: F811
    """Found reading the real experiment's report: a language-model cell resumed after a kill showed
    513 seconds beside its siblings' 2,600, the time since it resumed, under a bare "seconds"."""
    import json

    from sepo.reports.experiment import build_report

    folder = Path(shutil.copytree(finished_experiment, tmp_path / "experiment", ignore=shutil.ignore_patterns("report")))
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
    """Found in the real-model report: an invalid rate of 0.010 [-0.007, 0.027] over three seeds (a
    symmetric t-interval); a rate lies in [0, 1] and exploitability is never negative, so the
    interval is cut there. A metric of any sign keeps its interval."""
    from collections import defaultdict
    from types import SimpleNamespace

    from sepo.reports.experiment import Results, t_interval

    seeds = {"invalid_action_rate": [0.0, 0.03, 0.0], "kuhn/bet_rate_J": [0.99, 1.0, 0.96],
             "exploitability": [0.001, 0.2, 0.002], "utility": [0.0, 0.03, 0.0], "nra_gtbench": [1.0, 0.9, 1.0],
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
        if name in ("utility", "worst_excess_change_rate", "externality"):  # of either sign, or a surplus in some domain
            assert (shown[1], shown[2]) == (low, high) and low < 0
        elif name in ("kuhn/bet_rate_J", "nra_gtbench"):
            assert high > 1 and shown[2] == 1.0 and shown[1] == low
        else:
            assert low < 0 and shown[1] == 0.0 and shown[2] == high
