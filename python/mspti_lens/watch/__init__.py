"""Watch a running job's windows with rules and catch the moment one fires.

- :mod:`.rules`: the rule text and its model (:class:`Rule`, :func:`parse_rule`).
- :mod:`.evaluate`: a rule's statistic on a window, its baseline, and its alert state.
- :mod:`.source`: a run directory's new windows, per rank and merged across ranks.
- :mod:`.watcher`: the watcher (``python -m mspti_lens watch``, ``open_run(DIR).watch(...)``).
"""

from .evaluate import Baseline, Transition
from .rules import Rule, RuleError, parse_rule, parse_rules
from .watcher import Watcher

__all__ = ["Baseline", "Rule", "RuleError", "Transition", "Watcher", "parse_rule", "parse_rules"]
