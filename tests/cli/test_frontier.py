"""`sepo frontier --run` with an experiment: its finished cells of the game placed as the report
places them, tables exactly and a cell without a table by its audit."""
import json
import shutil

import numpy as np
import pytest

from tests.cli.cli_helpers import _error, _run
from tests.experiments.conftest import finished_experiment, tiny_domain  # noqa: F401 (the fixture)


def _trained_cells(folder):
    return sorted(p.parent.parent.name for p in (folder / "cells").glob("*/train/policy.json"))


def test_an_experiment_folder_places_every_trained_cell_of_the_game(finished_experiment):
    game = tiny_domain()
    result = _run("frontier", "--game", game, "--run", finished_experiment, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    trained = _trained_cells(finished_experiment)
    assert len(info["runs"]) == len(trained) > 1
    # the cells without a table (an untrained base) are placed by their audits, exact for a table agent
    untrained = len(list((finished_experiment / "cells").glob("*/result.json"))) - len(trained)
    assert len(info["models"]) == untrained > 0 and all(m["label"].endswith("(exact)") for m in info["models"])
    # labelled as the report labels them (method, λ, seed), each below or on the frontier
    assert all(" s0" in r["label"] or " s1" in r["label"] for r in info["runs"])
    assert all(r["gap"] >= -1e-9 for r in info["runs"])
    one = finished_experiment / "cells" / trained[0]
    alone = json.loads(_run("frontier", "--game", game, "--run", one, "--json").stdout)
    [run] = alone["runs"]
    assert run["exploitability"] == pytest.approx(
        next(r for r in info["runs"] if r["run"] == run["run"])["exploitability"])


def test_a_cell_without_a_table_is_placed_by_its_audit_on_the_frontier(finished_experiment, tmp_path):
    folder = tmp_path / "experiment"
    shutil.copytree(finished_experiment, folder)
    cell = _trained_cells(folder)[0]
    (folder / "cells" / cell / "train" / "policy.json").unlink()
    result = _run("frontier", "--game", tiny_domain(), "--run", folder / "cells" / cell, "--json",
                  "--plot", tmp_path / "f.png")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    [point] = info["models"]
    assert info["runs"] == []
    # a table's audit is exact: labelled so, its interval the point itself
    assert point["label"].endswith("(exact)") and not point["estimated"]
    assert point["exploitability_interval"] == [point["exploitability"]] * 2
    reach = np.interp(point["exploitability"], info["epsilons"], info["utilities"])
    assert point["frontier_utility"] == pytest.approx(reach)
    assert point["gap"] == pytest.approx(reach - point["utility"]) and point["gap"] >= -1e-6
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def test_an_experiment_without_the_game_or_an_unfinished_cell_is_one_line(finished_experiment, tmp_path):
    from sepo.games import domain_names, get_domain

    other = next(n for n in domain_names() if n != tiny_domain() and get_domain(n).frontier is None)
    _error(_run("frontier", "--game", tiny_domain(), "--run", finished_experiment / "cells" / "nope"),
           "nope")
    folder = tmp_path / "experiment"
    shutil.copytree(finished_experiment, folder)
    cell = _trained_cells(folder)[0]
    (folder / "cells" / cell / "result.json").unlink()
    _error(_run("frontier", "--game", tiny_domain(), "--run", folder / "cells" / cell), "without a result")
    assert other
