"""The ``streamkit`` command line (the one package that uses click), and Faust's ``option`` and
``argument`` for ``@app.command(...)`` (``from streamkit.cli import option``).

Owns: the command tree (``main``), one module per command group, the state directory's
record of a running worker (``statedir``).
May import: every layer below it (the top layer), ``web`` included.
"""

from streamkit.cli.appcommands import AppCommand, argument, option
from streamkit.cli.main import main

__all__ = ["AppCommand", "argument", "main", "option"]
