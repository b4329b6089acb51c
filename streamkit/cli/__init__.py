"""The ``streamkit`` command line (the one package that uses click), and Faust's ``option`` and
``argument`` for ``@app.command(...)`` (``from streamkit.cli import option``)."""

from streamkit.cli.appcommands import AppCommand, argument, option
from streamkit.cli.main import main

__all__ = ["AppCommand", "argument", "main", "option"]
