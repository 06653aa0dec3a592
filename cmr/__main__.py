"""``python -m cmr``: the same as the ``cmr`` console script."""

import sys

from cmr.cli import main

if __name__ == "__main__":
    sys.exit(main())
