"""`sepo frontier --run` with an experiment: its finished cells of the game placed as the report
places them, each by its audit at the checkpoint the report shows."""
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.cli.cli_helpers import _error, _run
from tests.experiments.conftest import tiny_domain


def _finished_cells(folder):
    return sorted(p.parent.name for p in (folder / "cells").glob("*/result.json"))


def _shown(folder, cell):
    """The cell's test exploitability at the checkpoint chosen on validation, from the results table."""
    rows = pq.read_table(folder / "results.parquet").to_pylist()
    [value] = [r["value"] for r in rows if r["cell"] == cell and r["split"] == "test"
               and r["chosen_by_validation"] and r["metric"] == "exploitability"]
    return value


def test_an_experiment_folder_places_every_finished_cell_at_its_shown_checkpoint(finished_experiment):
    game = tiny_domain()
    result = _run("frontier", "--game", game, "--run", finished_experiment, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    finished = _finished_cells(finished_experiment)
    assert info["runs"] == [] and sorted(m["cell"] for m in info["models"]) == finished
    for point in info["models"]:
        # the checkpoint the report shows (not the run's final table), exact for a table agent
        assert point["exploitability"] == pytest.approx(_shown(finished_experiment, point["cell"]))
        assert point["label"].endswith("(exact)") and not point["estimated"]
        assert point["exploitability_interval"] == [point["exploitability"]] * 2
        reach = np.interp(point["exploitability"], info["epsilons"], info["utilities"])
        assert point["frontier_utility"] == pytest.approx(reach) and point["gap"] >= -1e-6
        low, high = point["gap_range"]
        assert low <= point["gap"] + 1e-12 and point["gap"] <= high + 1e-12
    one = finished[0]
    alone = json.loads(_run("frontier", "--game", game, "--run", finished_experiment / "cells" / one,
                            "--json").stdout)
    [point] = alone["models"]
    assert point["cell"] == one


def test_two_experiments_are_told_apart_and_a_repeated_folder_placed_once(finished_experiment, tmp_path):
    other = tmp_path / "again"
    shutil.copytree(finished_experiment, other)
    result = _run("frontier", "--game", tiny_domain(), "--run", finished_experiment, "--run", other,
                  "--run", other, "--json", "--plot", tmp_path / "f.png")
    assert result.exit_code == 0, result.output
    assert "given more than once: placed once" in result.stderr
    models = json.loads(result.stdout)["models"]
    assert len(models) == 2 * len(_finished_cells(finished_experiment))
    assert {m["label"].split(":")[0] for m in models} == {finished_experiment.name, "again"}
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def test_an_unfinished_cell_is_said_and_one_that_cannot_be_placed_is_one_line(finished_experiment, tmp_path):
    folder = tmp_path / "experiment"
    shutil.copytree(finished_experiment, folder)
    cell = _finished_cells(folder)[0]
    (folder / "cells" / cell / "result.json").unlink()
    result = _run("frontier", "--game", tiny_domain(), "--run", folder, "--json")
    assert result.exit_code == 0 and "1 of its" in result.stderr and "have no result yet" in result.stderr
    assert cell not in {m["cell"] for m in json.loads(result.stdout)["models"]}
    _error(_run("frontier", "--game", tiny_domain(), "--run", folder / "cells" / cell), "without a result")
    _error(_run("frontier", "--game", tiny_domain(), "--run", folder / "cells" / "nope"), "nope")
    _error(_run("frontier", "--game", tiny_domain(), "--run", folder / "plan.json"), "is a file")
    lone = tmp_path / "lone"
    shutil.copytree(folder / "cells" / _finished_cells(folder)[0], lone)
    _error(_run("frontier", "--game", tiny_domain(), "--run", lone), "outside its experiment")


def test_pools_with_an_experiment_is_refused(finished_experiment, tmp_path):
    """The experiment's cells were audited against the domain's own train pool: another pool would
    move the frontier under them."""
    pools = tmp_path / "pools.yaml"
    pools.write_text("train: []\n")
    _error(_run("frontier", "--game", tiny_domain(), "--run", finished_experiment, "--pools", pools),
           "--pools", "training runs only")
