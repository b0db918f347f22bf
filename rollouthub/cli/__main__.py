"""``python -m rollouthub.cli``."""

import sys

from rollouthub.cli import main

sys.exit(main())
