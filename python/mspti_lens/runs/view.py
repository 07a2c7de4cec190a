"""The old name of :mod:`mspti_lens.notebook.run_view` (how a run looks in a notebook, which is
notebook code): ``mspti_lens.runs.view`` is that very module, so old imports keep working."""

import sys

from ..notebook import run_view

sys.modules[__name__] = run_view
