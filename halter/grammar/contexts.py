"""Contexts of parser items: the two special ids, the flags a context may carry, interning keys.

A context says where a rule returns when it ends: an int id into the ``StateSpace`` tables
``ctx_returns`` (``(position after the call, caller's context id)`` pairs) and ``ctx_flags``.
"""
from __future__ import annotations

# The two special contexts, and the flags marking the special endings a context may include:
# ``ENDS_ROOT`` (the whole input may end: the BOTTOM context) and ``ESCAPES`` (an unknown caller:
# the OPAQUE context). A context can be the union of several, when items at one position merge.
BOTTOM_ID, OPAQUE_ID = 0, 1
ENDS_ROOT, ESCAPES = 1, 2


def meaning_key(flags: int, returns) -> tuple:
    """The interning key of a context by what it does: its flags and the places it returns to."""
    return ("returns", flags, tuple(sorted(set(returns))))


def same_context(ref: int) -> int:
    """The identity map on context ids (a resolver for closures that made no local context)."""
    return ref
