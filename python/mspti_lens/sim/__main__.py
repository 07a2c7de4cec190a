"""The simulator's command line: ``python -m mspti_lens.sim job --ranks N [--hosts H]
[--slow-rank K] [--slow-link A-B]`` (a multi-process simulated job; see :mod:`.job`), and
``python -m mspti_lens.sim cann DIR`` (a simulated CANN toolkit tree; see :mod:`.cann`)."""

import sys

if sys.argv[1:2] == ["cann"]:
    from .cann import main as cann_main

    sys.exit(cann_main(sys.argv[2:]))

from .job import main

if sys.argv[1:2] in (["-h"], ["--help"]):
    # The job parser knows only its own commands.
    print("python -m mspti_lens.sim cann DIR: write a simulated CANN toolkit tree (cann --help)\n")
sys.exit(main())
