"""The code passes ruff as configured in pyproject.toml ([tool.ruff]): pycodestyle, pyflakes and
import order, lines of at most 110 characters."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKED = ["sepo", "tests", "benchmarks", "examples"]


def _ruff() -> list[str]:
    """The ruff of this environment (the dev extra installs it), else one on PATH."""
    try:
        import ruff  # noqa: F401

        return [sys.executable, "-m", "ruff"]
    except ImportError:
        found = shutil.which("ruff")
        if found is None:
            pytest.skip("ruff is not installed (pip install -e '.[dev]')")
        return [found]


def test_ruff_finds_nothing():
    result = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", *CHECKED],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (
        f"ruff check {' '.join(CHECKED)}:\n{result.stdout[-6000:]}{result.stderr[-2000:]}"
    )


def test_ruff_would_catch_a_finding(tmp_path):
    """The check can fail: an unused import and a long line in a file of the same configuration."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n\nLONG = '" + "x" * 120 + "'\n")
    result = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "bad.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "F401" in result.stdout and "E501" in result.stdout
