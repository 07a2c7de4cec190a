"""``python -m mspti_lens.sim job --ranks N [--hosts H] [--slow-rank K] [--slow-link A-B]``: the
simulator's command line (a multi-process simulated job; see :mod:`.job`)."""

import sys

from .job import main

sys.exit(main())
