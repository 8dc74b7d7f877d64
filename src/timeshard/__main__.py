"""``python -m timeshard``: the command line, as the ``timeshard`` script."""

from timeshard.cli.main import main

main()
