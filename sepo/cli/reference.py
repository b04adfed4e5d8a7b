"""The Click command that Typer builds from the ``sepo`` app, for generated CLI documentation.

The manual's CLI reference (mkdocs-click) reads ``command``; it is the same command tree the
``sepo`` entry point runs, so the reference cannot drift from the options the CLI accepts.
"""

import typer

from sepo.cli.main import app

command = typer.main.get_command(app)
