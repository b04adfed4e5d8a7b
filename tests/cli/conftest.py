"""Fixtures of the CLI tests."""
import pytest

from tests.cli.cli_helpers import _run
from tests.experiments.conftest import finished_experiment  # noqa: F401 (the fixture)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished tabular Kuhn run (6 steps), made once per module."""
    out = tmp_path_factory.mktemp("runs") / "finished"
    assert _run("train", "--out", out, "--steps", "6", "--groups", "2", "--quiet").exit_code == 0
    return out
