"""``python -m rollouthub.quickstart``."""

import sys

from rollouthub.quickstart.main import main

if __name__ == "__main__":
    sys.exit(main())
