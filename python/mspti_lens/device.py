"""The old name of :mod:`mspti_lens.activity`: ``mspti_lens.device`` is that very module, so
code written against it goes on working."""

import sys

from . import activity

sys.modules[__name__] = activity
