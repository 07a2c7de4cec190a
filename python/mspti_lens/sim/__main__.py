"""The simulator's command line: ``python -m mspti_lens.sim job --ranks N [--hosts H]
[--slow-rank K] [--slow-link A-B]`` (a multi-process simulated job; see :mod:`.job`), and
``python -m mspti_lens.sim cann DIR`` (a simulated CANN toolkit tree; see :mod:`.cann`)."""

import sys

from .job import main

sys.exit(main())
