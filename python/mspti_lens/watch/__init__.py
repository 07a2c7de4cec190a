"""Watch a running job's windows with rules and catch the moment one fires.

- :mod:`.rules`: the rule text and its model (:class:`Rule`, :func:`parse_rule`).
"""

from .rules import Rule, RuleError, parse_rule, parse_rules

__all__ = ["Rule", "RuleError", "parse_rule", "parse_rules"]
