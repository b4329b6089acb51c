"""``python -m streamkit.cli``: the same as the ``streamkit`` command."""

from streamkit.cli.main import main

main()
