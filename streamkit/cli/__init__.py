"""The ``streamkit`` command line (the one package that uses click)."""

from streamkit.cli.main import main

__all__ = ["main"]
