"""``python -m rollouthub``: the ``rollouthub`` command (same subcommands and options)."""

import sys

from rollouthub.cli import main

sys.exit(main())
