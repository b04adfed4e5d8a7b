"""`sepo experiment run --backend ray --address ...` on a real Ray cluster (a head and worker nodes,
each its own processes, on this machine), a node stopped mid-study, and the runner's handling of a
cell lost with its node."""

from __future__ import annotations

import fcntl
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sepo.cli.main import app
from sepo.errors import SepoError
from sepo.experiments import runner as runner_module
from sepo.experiments.runner import read_results, run_experiment
from sepo.runs import LOCK, TMP_PREFIX
from tests.experiments.conftest import tiny_config

ROOT = Path(__file__).resolve().parents[2]
ray = pytest.importorskip(
    "ray", reason="the ray extra is not installed (pip install 'sepo[ray]'; dev pulls it in)"
)


def _rows(folder: Path) -> list[str]:
    return [repr(sorted(row.items())) for row in read_results(folder).to_pylist()]  # repr: nan == nan


def _files(folder: Path) -> dict[str, set[str]]:
    """Every cell folder's files (the lock file aside), by cell."""
    return {
        cell.name: {str(p.relative_to(cell)) for p in cell.rglob("*") if p.is_file() and p.name != LOCK}
        for cell in (folder / "cells").iterdir()
    }


def _sepo(cluster, *args: str) -> subprocess.Popen:
    """The sepo CLI in its own process, in the cluster's environment (no token asked)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sepo.cli.main", *args],
        env=cluster.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _small_config(tmp_path: Path, **changes) -> Path:
    config = tmp_path / "study.yaml"
    config.write_text(
        tiny_config(
            **{
                "[base, sft, grpo, sepo, constant]": "[base, sepo]",
                "seeds: [0, 1]": "seeds: [0]",
                "[1.0, 4.0]": "[1.0]",
                **changes,
            }
        )
    )
    return config


def _check_finished_like(out: Path, local: Path) -> None:
    """The cluster's study equals the local one: the table row by row, every cell folder's files, no
    temporaries, and every cell's run marked complete."""
    assert _rows(out) == _rows(local)
    assert _files(out) == _files(local)
    assert not list(out.rglob(f"{TMP_PREFIX}*"))
    for cell in (out / "cells").iterdir():
        assert json.loads((cell / "sepo-run.json").read_text())["complete"] is True, cell.name


def test_a_two_node_ray_cluster_runs_the_cells_and_gives_the_local_runs_table(tmp_path):
    """About 30 s: a head (no CPUs) and two one-CPU worker nodes, two cells through the CLI."""
    from tests.experiments.raycluster import RayCluster

    config = _small_config(tmp_path)
    run_experiment(config, tmp_path / "local")
    with RayCluster(workers=2) as cluster:
        process = _sepo(
            cluster,
            "experiment",
            "run",
            str(config),
            "--out",
            str(tmp_path / "ray"),
            "--backend",
            "ray",
            "--address",
            cluster.address,
            "--quiet",
        )
        stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    assert "2 of 2 cells finished" in stdout and "lost" not in stdout + stderr
    assert not cluster.ours()  # every process of the cluster ended
    _check_finished_like(tmp_path / "ray", tmp_path / "local")


@pytest.mark.slow
def test_a_study_finishes_equal_to_a_local_run_when_a_cluster_node_is_stopped_mid_cell(tmp_path):
    """About 2 min: seven cells of about 4 s on two worker nodes; worker node 0's raylet is killed
    (SIGKILL, by PID) while it runs a cell. The lost cell is run again on the other node; the results
    table equals a local run's row by row, and every cell folder holds what a local run's holds."""
    from tests.experiments.raycluster import RayCluster

    config = tmp_path / "study.yaml"
    config.write_text(
        tiny_config(
            **{
                "[base, sft, grpo, sepo, constant]": "[base, grpo, sepo]",
                "steps: 8, groups: 8": "steps: 2000, groups: 8",
            }
        )
    )
    run_experiment(config, tmp_path / "local")
    out = tmp_path / "ray"
    with RayCluster(workers=2) as cluster:
        process = _sepo(
            cluster,
            "experiment",
            "run",
            str(config),
            "--out",
            str(out),
            "--backend",
            "ray",
            "--address",
            cluster.address,
            "--quiet",
        )
        try:
            rng, stopped = random.Random(3), []
            deadline = time.monotonic() + 240
            while not stopped and process.poll() is None and time.monotonic() < deadline:
                if cluster.running_cells(0):
                    time.sleep(rng.uniform(1.0, 2.0))  # a moment inside a trained cell (they last about 4 s)
                    stopped = cluster.running_cells(0)  # still at it: not the base cell, which takes 0.3 s
                    if stopped:
                        cluster.kill_node(0)
                time.sleep(0.05)
            assert stopped, "worker node 0 never ran a cell long enough to be stopped in it"
            stdout, stderr = process.communicate(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
        alive = [pid for pid in stopped if os.path.exists(f"/proc/{pid}")]
    assert process.returncode == 0, stderr[-3000:]
    assert stopped and not alive
    assert "7 of 7 cells finished" in stdout
    assert "cell(s) were lost with their node or worker and run again" in stdout, stdout
    assert "the cluster node running it died" in stderr and "attempt 2 of 4" in stderr, stderr[-3000:]
    assert not cluster.ours()
    _check_finished_like(out, tmp_path / "local")


# ------------------------------------------------------------------ the runner, without a cluster


class _LosingBackend:
    """Runs cells here, one at a time, but loses the first `losses` attempts of the cells named in
    `lose` after they have written part of their folder (as a node dying mid-cell leaves it)."""

    def __init__(self, lose: set[str], losses: int):
        self.lose, self.losses, self.capacity, self.tried = lose, losses, 1, {}

    def __call__(self, config, workers, address=None, notice=None):
        return self

    def submit(self, config_data, cell, out):
        self.tried[cell.id] = self.tried.get(cell.id, 0) + 1
        if cell.id in self.lose and self.tried[cell.id] <= self.losses:
            from sepo.experiments.config import validate_config
            from sepo.experiments.execute import CELL, OWNER
            from sepo.runs import open_run

            settings = {"cell": cell.record(), "config_hash": validate_config(config_data).hash()}
            with open_run(Path(out) / "cells" / cell.id, CELL, settings, part_of=OWNER) as run:
                run.write_text("train/half-written.txt", "x")
                run.commit()
            return (cell.id, "the cluster node running it died (test)")
        runner_module._run_cell_on_node(config_data, cell, out)
        return (cell.id, None)

    def wait(self, futures):
        return [(futures[0], futures[0][1])]

    def close(self, abort=False):
        pass


def _first_trained_cell(config: Path) -> str:
    from sepo.experiments.cells import expand
    from sepo.experiments.config import load_config

    return next(c.id for c in expand(load_config(config)[0]).cells if c.stage != "base")


def test_a_cell_lost_with_its_node_is_run_again_said_and_ends_as_in_a_local_run(tmp_path, monkeypatch):
    config = _small_config(tmp_path)
    run_experiment(config, tmp_path / "local")
    lost = _first_trained_cell(config)
    backend = _LosingBackend({lost}, losses=2)
    monkeypatch.setattr(runner_module, "RayBackend", backend)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    notices = []
    summary = run_experiment(config, tmp_path / "ray", backend="ray", on_notice=notices.append)
    assert summary["retried"] == {lost: 2} and summary["ran"] == summary["cells"] == 2
    assert notices == summary["notices"] and len(notices) == 2
    assert notices[0].startswith(
        f"cell {lost}: the cluster node running it died (test); running it again (attempt 2 of 4)"
    )
    assert "attempt 3 of 4" in notices[1]
    _check_finished_like(tmp_path / "ray", tmp_path / "local")


def test_a_cell_lost_more_often_than_it_is_retried_stops_the_study_in_one_line_keeping_the_rest(
    tmp_path, monkeypatch
):
    config = _small_config(tmp_path)
    lost = _first_trained_cell(config)
    monkeypatch.setattr(runner_module, "RayBackend", _LosingBackend({lost}, losses=99))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(SepoError) as error:
        run_experiment(config, tmp_path / "ray", backend="ray")
    message = str(error.value)
    assert (
        f"cell {lost} was lost 4 times, the last because the cluster node running it died (test)" in message
    )
    assert "the same command resumes the rest" in message and "\n" not in message
    finished = [p.parent.name for p in (tmp_path / "ray" / "cells").glob("*/result.json")]
    assert lost not in finished


def test_a_new_attempt_waits_for_the_lost_one_to_let_go_and_does_not_redo_a_cell_it_finished(
    tmp_path, monkeypatch
):
    """A lost attempt may outlive its node's scheduler: the new one waits while it holds the cell's
    lock, then finds its result and runs nothing."""
    out = tmp_path / "out"
    (out / "cells" / "c1").mkdir(parents=True)
    (out / "plan.json").write_text("{}")
    ran = []
    monkeypatch.setattr(
        runner_module, "_run_cell_task", lambda config_data, cell, folder: ran.append(cell.id) or cell.id
    )
    fd = os.open(out / "cells" / "c1" / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)

    class Cell:
        id = "c1"

    returned = []
    thread = threading.Thread(
        target=lambda: returned.append(runner_module._run_cell_on_node({}, Cell, str(out)))
    )
    thread.start()
    time.sleep(1.5)
    assert thread.is_alive() and not returned  # waiting while the lost attempt holds the folder
    (out / "cells" / "c1" / "result.json").write_text("{}")  # the lost attempt finished the cell
    os.close(fd)
    thread.join(10)
    assert returned == ["c1"] and ran == []
    (out / "cells" / "c1" / "result.json").unlink()
    assert runner_module._run_cell_on_node({}, Cell, str(out)) == "c1" and ran == [
        "c1"
    ]  # nothing held: it runs


def test_a_cell_on_a_node_without_the_experiment_folder_is_one_line_naming_the_shared_filesystem(tmp_path):
    class Cell:
        id = "c1"

    with pytest.raises(SepoError, match="--out must be a folder every node mounts at the same path") as error:
        runner_module._run_cell_on_node({}, Cell, str(tmp_path / "elsewhere"))
    assert "\n" not in str(error.value)


def test_a_lost_task_is_told_from_a_cells_own_error():
    e = ray.exceptions
    died = e.NodeDiedError(
        "Task failed because the node it was running on is dead or unavailable. Node IP: "
        "10.0.0.7, node ID: 788b703d914a102ba2360d0ad408abaaa852ef62a36dcb00c8e3c396."
    )
    assert runner_module._lost(ray, died) == "the cluster node running it died (10.0.0.7, node 788b703d)"
    crashed = e.WorkerCrashedError()
    assert runner_module._lost(ray, crashed).startswith("the Ray worker process running it died")
    assert runner_module._lost(ray, e.TaskCancelledError()) is None
    assert runner_module._lost(ray, e.RayTaskError("f", "trace", ValueError("own"))) is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--address", "127.0.0.1:6379"], "--address names a Ray cluster: use it with --backend ray"),
        (
            ["--backend", "ray", "--address", "head node"],
            "is not a Ray address: give the head node's host:port",
        ),
        (["--backend", "ray", "--address", "127.0.0.1:70000"], "is not a Ray address"),
        (["--backend", "ray", "--address", "127.0.0.1:PORT"], "no Ray cluster answers at 127.0.0.1:"),
    ],
)
def test_a_ray_address_that_is_wrong_or_does_not_answer_is_one_line_before_the_folder_is_made(
    tmp_path, args, expected
):
    from tests.experiments.raycluster import free_port

    config = _small_config(tmp_path)
    args = [a.replace("PORT", str(free_port())) for a in args]
    started = time.monotonic()
    result = CliRunner().invoke(
        app, ["experiment", "run", str(config), "--out", str(tmp_path / "out"), *args]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "out").exists() and time.monotonic() - started < 30
