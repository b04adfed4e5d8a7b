"""What the CLI tests share: an in-process `sepo` call and the one-line-error check."""
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
