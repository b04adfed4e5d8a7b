"""What the CLI tests share: an in-process `sepo` call, the one-line-error check, a finished run's
files and a copy of it."""
from pathlib import Path

from typer.testing import CliRunner

from sepo.cli.main import app


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"HF_HUB_OFFLINE": "1", "COLUMNS": "200"})


def _error(result, *words):
    """Exit 2 with one line on stderr (no traceback) that holds every word."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 600, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "analysis"
TINY = ["--steps", "3", "--groups", "2", "--quiet"]


def _tree(root):
    """Every file under `root` with its bytes (what a command must leave as it found it)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def _copy(run, tmp_path, name="run"):
    import shutil

    return Path(shutil.copytree(run, tmp_path / name))
