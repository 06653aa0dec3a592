"""``python -m tracer``: the same as the ``tracer`` console script."""

import sys

from tracer.run.cli import main

if __name__ == "__main__":
    sys.exit(main())
