"""The experiment runner: one results table, resumable after kill -9, refuses another config."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.errors import SepoError
from sepo.experiments.config import validate_config
from sepo.experiments.runner import read_results, run_experiment
from sepo.experiments.seeds import check_disjoint, episode_seeds, split_seed
from sepo.games import domain_names, get_domain
from tests.experiments.conftest import tiny_config, tiny_domain
from tests.experiments.workers import mark_and_sleep

ROOT = Path(__file__).resolve().parents[2]


def _rows(folder: Path) -> list[str]:
    return [repr(sorted(row.items())) for row in read_results(folder).to_pylist()]  # repr: nan == nan


def test_the_results_table_has_one_row_per_cell_metric_with_interval_seed_hash_and_versions(
    finished_experiment,
):
    table = read_results(finished_experiment).to_pylist()
    plan = json.loads((finished_experiment / "plan.json").read_text())
    assert {r["cell"] for r in table} == {c["id"] for c in plan["cells"]}
    assert {r["config_hash"] for r in table} == {plan["config_hash"]}
    assert all(json.loads(r["versions"])["numpy"] for r in table)
    safety = [
        r for r in table if r["metric"] == "safety" and r["split"] == "test" and r["chosen_by_validation"]
    ]
    assert len(safety) == len(plan["cells"])  # exactly one shown checkpoint per cell
    assert all(r["low"] <= r["value"] <= r["high"] for r in safety)
    trained = [r for r in table if r["stage"] == "sepo"]
    assert {r["seed"] for r in trained} == {0, 1} and {r["checkpoint"] for r in trained} == {
        "step_4",
        "final",
    }
    # the shown checkpoint is the one with the best safety on validation episodes
    for cell in {r["cell"] for r in trained}:
        val = {
            r["checkpoint"]: r["value"]
            for r in table
            if r["cell"] == cell and r["metric"] == "safety" and r["split"] == "validation"
        }
        shown = {r["checkpoint"] for r in table if r["cell"] == cell and r["chosen_by_validation"]}
        assert shown == {max(val, key=lambda k: (val[k], k == "final"))}


def test_validation_and_test_episodes_never_share_a_seed(finished_experiment):
    audit = json.loads(next((finished_experiment / "cells").glob("*/audits/final.json")).read_text())
    assert (
        audit["validation"]["seed"]
        == split_seed(0, "validation")
        != audit["test"]["seed"]
        == split_seed(0, "test")
    )
    for name in domain_names():
        for protocol in ("rigorous", "paper"):
            game = get_domain(name).game(protocol)
            validation = episode_seeds(game, protocol, split_seed(0, "validation"), 50)
            test = episode_seeds(game, protocol, split_seed(0, "test"), 50)
            assert validation and test and not validation & test


def test_a_config_whose_splits_would_share_seeds_is_refused():
    import yaml

    data = yaml.safe_load(tiny_config())
    # the paper's seeds: seed·10⁶ + ep·1000 + c
    data.update(protocol="paper", episodes={"validation": 5, "test": 1001})
    with pytest.raises(SepoError, match="validation and test episodes of .* share"):
        check_disjoint(validate_config(data))


def test_another_config_in_the_results_folder_is_refused(finished_experiment, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(tiny_config(**{"seeds: [0, 1]": "seeds: [0, 3]"}))
    before = sorted(p.name for p in finished_experiment.iterdir())
    result = CliRunner().invoke(
        app, ["experiment", "run", str(other), "--out", str(finished_experiment), "--quiet"]
    )
    assert result.exit_code == 2
    assert "different config" in result.output and "seeds" in result.output
    assert len(result.output.strip().splitlines()) <= 2  # one line (wrapped at most once by the console)
    assert sorted(p.name for p in finished_experiment.iterdir()) == before


def test_a_finished_experiment_resumed_does_nothing(finished_experiment, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_config())
    before = _rows(finished_experiment)
    summary = run_experiment(finished_experiment / "experiment.yaml", finished_experiment)
    assert summary["ran"] == 0 and summary["already_finished"] == summary["cells"]
    assert _rows(finished_experiment) == before


def test_kill_9_at_three_random_moments_then_resume_gives_the_uninterrupted_table(tmp_path):
    """Each kill lands mid-run whatever the machine's speed: after the run has finished at least one
    new cell, plus a random delay; the runner and its pool workers (its process group) get SIGKILL."""
    config = tmp_path / "small.yaml"
    config.write_text(
        tiny_config(
            **{"[base, sft, grpo, sepo, constant]": "[base, grpo, sepo]", "seeds: [0, 1]": "seeds: [0, 1, 2]"}
        )
    )
    run_experiment(config, tmp_path / "whole")
    out = tmp_path / "killed"
    command = [
        sys.executable,
        "-m",
        "sepo.cli.main",
        "experiment",
        "run",
        str(config),
        "--out",
        str(out),
        "--quiet",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = np.random.default_rng(11)
    kills = 0
    for _ in range(3):
        finished = len(list(out.glob("cells/*/result.json")))
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + 300
        while (
            process.poll() is None
            and len(list(out.glob("cells/*/result.json"))) <= finished
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        time.sleep(float(rng.uniform(0.0, 0.3)))  # the random moment: somewhere in the next cells
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            kills += 1
        process.wait()
    assert kills >= 2
    assert subprocess.run(command, env=env, capture_output=True, timeout=600).returncode == 0
    assert _rows(out) == _rows(tmp_path / "whole")
    assert not list(out.rglob(".sepo-tmp-*"))


def test_the_ray_backend_on_a_local_instance_gives_the_local_backends_table(tmp_path):
    ray = pytest.importorskip(
        "ray", reason="the ray extra is not installed (pip install 'sepo[ray]'; dev pulls it in)"
    )
    config = tmp_path / "small.yaml"
    config.write_text(
        tiny_config(**{"[base, sft, grpo, sepo, constant]": "[base, sepo]", "seeds: [0, 1]": "seeds: [0]"})
    )
    run_experiment(config, tmp_path / "local")
    try:
        summary = run_experiment(config, tmp_path / "ray", backend="ray", workers=2)
    finally:
        ray.shutdown()
    assert summary["ran"] == summary["cells"] == 3
    assert _rows(tmp_path / "ray") == _rows(tmp_path / "local")


def test_an_agents_own_episode_counts_are_checked_for_shared_seeds_too():
    import yaml

    data = yaml.safe_load(tiny_config())
    data["protocol"] = "paper"
    data["agents"].append(
        {"name": "ref", "kind": "fixed", "spec": "uniform", "episodes": {"validation": 1, "test": 1001}}
    )
    with pytest.raises(SepoError, match="share"):
        check_disjoint(validate_config(data))


def test_overwrite_keeps_the_users_files_inside_cells(tmp_path):
    """`experiment run --overwrite` keeps a file of the user's in E/cells/."""
    config = tmp_path / "small.yaml"
    config.write_text(
        tiny_config(
            **{
                "[base, sft, grpo, sepo, constant]": "[base, sepo]",
                "seeds: [0, 1]": "seeds: [0]",
                "e: [1.0, 4.0]": "e: 1.0",
            }
        )
    )
    out = tmp_path / "out"
    run_experiment(config, out)
    cell = next(p for p in (out / "cells").iterdir() if "sepo" in p.name)
    (out / "cells" / "notes.txt").write_text("mine")
    (cell / "notes.txt").write_text("mine too")
    (cell / "train" / "notes.txt").write_text("and mine")
    before = _rows(out)
    summary = run_experiment(config, out, overwrite=True)
    assert summary["ran"] == summary["cells"] == 2 and _rows(out) == before
    assert [(p / "notes.txt").read_text() for p in (out / "cells", cell, cell / "train")] == [
        "mine",
        "mine too",
        "and mine",
    ]


def test_a_stopped_runner_ends_its_running_cells_at_once(tmp_path):
    """SIGTERM to `sepo experiment run --workers 2` reaches only the runner, which ends its running cells
    at once (they resume as after a kill -9) rather than wait for them to finish."""
    from sepo.experiments.runner import LocalBackend

    engine = LocalBackend(2)
    marks = [tmp_path / f"running-{i}" for i in range(2)]
    running = [engine.pool.submit(mark_and_sleep, str(mark), 120) for mark in marks]
    deadline = time.monotonic() + 60  # a worker's start (spawn, imports) on a loaded machine
    while not all(mark.exists() for mark in marks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(mark.exists() for mark in marks), "the two cells never started"
    started = time.monotonic()
    engine.close(abort=True)
    assert time.monotonic() - started < 30 and all(f.done() for f in running)


def test_cells_start_seed_major_so_a_stopped_experiment_holds_every_method_at_its_first_seed(tmp_path):
    from sepo.experiments.cells import expand
    from sepo.experiments.config import load_config
    from sepo.experiments.runner import seed_major

    path = tmp_path / "x.yaml"
    path.write_text(tiny_config())
    config, _ = load_config(path)
    plan = expand(config)
    ordered = sorted(plan.cells, key=seed_major(config, plan))
    seeds = [c.seed for c in ordered]
    assert seeds[0] is None and [s for s in seeds if s is not None] == sorted(
        s for s in seeds if s is not None
    )
    first = [c for c in ordered if c.seed == 0]
    assert {c.stage for c in first} == {c.stage for c in plan.cells if c.seed is not None}
    # the plan's order within a seed
    assert [c.id for c in first] == [c.id for c in plan.cells if c.seed == 0]
    # the plan itself is stage-major
    assert [c.seed for c in plan.cells if c.seed is not None] != [s for s in seeds if s is not None]


def test_seed_major_ranks_a_seed_by_its_place_in_its_own_agents_seeds(tmp_path):
    """An agent with seeds of its own starts at its first seed with the others at theirs: ranked
    by the position in one list of every agent's seeds, the agent listing [5, 6] ran both its seeds
    before the other agent's first."""
    from sepo.experiments.cells import expand
    from sepo.experiments.config import load_config
    from sepo.experiments.runner import seed_major

    path = tmp_path / "x.yaml"
    path.write_text(
        tiny_config(
            **{
                "  - {name: tab, kind: tabular}": "  - {name: tab, kind: tabular, seeds: [5, 6]}\n  - {name: "
                                                  "other, kind: tabular}"
            }
        )
    )
    config, _ = load_config(path)
    plan = expand(config)
    ordered = [c for c in sorted(plan.cells, key=seed_major(config, plan)) if c.seed is not None]
    position = {"tab": [5, 6], "other": [0, 1]}
    ranks = [position[c.agent].index(c.seed) for c in ordered]
    assert ranks == sorted(ranks) and {c.agent for c in ordered[: ranks.count(0)]} == {"tab", "other"}


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_more_workers_than_usable_cores_is_one_line_before_the_folder_is_made(tmp_path, monkeypatch, backend):
    """--workers above the cores this process may use is refused in one line before the folder is made
    (on a 2-core machine, 1024 workers would spawn 1024 interpreters, each loading torch)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = tmp_path / "x.yaml"
    config.write_text(tiny_config())
    result = CliRunner().invoke(
        app,
        [
            "experiment",
            "run",
            str(config),
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "3",
            "--backend",
            backend,
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "--workers 3 is more cells at once than the 2 CPU cores" in result.stderr
    assert "use --workers 2 or fewer" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_only_runs_the_named_domains_cells_and_a_later_run_without_it_finishes_the_rest(tmp_path):
    """--only DOMAIN runs that domain's cells and leaves the others pending; the same command
    without --only then runs just those. (The second domain: the trainable one with the fewest
    game parameters, a stand-in for the cheapest.)"""
    first = tiny_domain()
    others = [n for n in domain_names() if get_domain(n).training is not None and n != first]
    second = min(others, key=lambda n: len(get_domain(n).params))
    text = tiny_config(first, **{"stages: [base, sft, grpo, sepo, constant]": "stages: [base, sepo]",
                                 "seeds: [0, 1]": "seeds: [0]"})
    two = text.replace(f"  - name: {first}\n", f"  - name: {first}\n    lambdas: {{e: 1.0, c: 0.0, x: 0.0}}\n"
                                                f"  - name: {second}\n", 1)
    one_lambda = "    lambdas: {e: 1.0, c: 0.0, x: 0.0}\n"
    two = two.replace("    lambdas: {e: [1.0, 4.0], c: 0.0, x: 0.0}\n", one_lambda)
    config = tmp_path / "two.yaml"
    config.write_text(two)
    part = run_experiment(config, tmp_path / "part", only=[second])
    ran = {p.name for p in (tmp_path / "part" / "cells").iterdir() if (p / "result.json").exists()}
    assert ran and all(name.startswith(f"{second}_") for name in ran)
    assert part["not_selected"] == part["cells"] - len(ran) > 0
    rest = run_experiment(config, tmp_path / "part")
    assert rest["ran"] == part["not_selected"] and rest["finished"] == rest["cells"]
    assert {row["cell"] for row in read_results(tmp_path / "part").to_pylist()} == {
        p.name for p in (tmp_path / "part" / "cells").iterdir()}


def test_only_with_a_name_not_in_the_config_is_one_line_naming_the_domains(tmp_path):
    config = tmp_path / "x.yaml"
    config.write_text(tiny_config())
    result = CliRunner().invoke(app, ["experiment", "run", str(config), "--out", str(tmp_path / "out"),
                                      "--only", "nosuchgame"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "nosuchgame" in result.output and tiny_domain() in result.output
    assert not (tmp_path / "out").exists()
