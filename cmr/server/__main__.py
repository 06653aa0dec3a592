"""``python -m cmr.server``: the repository's server alone, without the rest of the CLI."""

import sys

from cmr.server.server import main

sys.exit(main())
