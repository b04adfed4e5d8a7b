"""The tiny finished experiment the report tests read (run once per test run)."""
from tests.experiments.conftest import finished_experiment  # noqa: F401 (the fixture)
