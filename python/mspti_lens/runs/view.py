"""The old name of :mod:`mspti_lens.notebook.run_view` (how a run looks in a notebook, which is
notebook code): this module is that one, so old imports keep working and patch the same names."""

import sys

from ..notebook import run_view

sys.modules[__name__] = run_view
