"""Contexts of parser items: the special ids and flags, and the tables that make, merge and intern them.

A context says where a rule returns when it ends: an int id into the ``StateSpace`` tables
``ctx_returns`` (``(position after the call, caller's context id)`` pairs) and ``ctx_flags``.
"""
from __future__ import annotations

import threading

# The two special contexts, and the flags marking the special endings a context may include:
# ``ENDS_ROOT`` (the whole input may end: the BOTTOM context) and ``ESCAPES`` (an unknown caller:
# the OPAQUE context). A context can be the union of several, when items at one position merge.
BOTTOM_ID, OPAQUE_ID = 0, 1
ENDS_ROOT, ESCAPES = 1, 2


class _WorkMeter(threading.local):
    """Parser work done by this thread (items walked, contexts made, returns merged): the matching
    budget (``Limits.match_work``) reads it."""
    n = 0


WORK = _WorkMeter()


def meaning_key(flags: int, returns) -> tuple:
    """The interning key of a context by what it does: its flags and the places it returns to."""
    return ("returns", flags, tuple(sorted(set(returns))))


def same_context(ref: int) -> int:
    """The identity map on context ids (a resolver for closures that made no local context)."""
    return ref


class ContextTables:
    """The context tables of a ``StateSpace``: contexts made, substituted, merged and interned.

    A context id indexes ``ctx_returns`` (its ``(after, context id)`` pairs, sorted, one per place
    once merged) and ``ctx_flags``. Contexts are made three ways: by meaning (``context_by_meaning``: the
    Earley walk's contexts and unions that need no merge), by substituting a caller for OPAQUE in an
    opaque node's context (``_subst``, interned by the pair), and as unions of contexts that return
    to one place (``_union``, interned by their members).
    """

    def __init__(self) -> None:
        self.ctx_returns: list[tuple[tuple[int, int], ...]] = [(), ()]   # context id -> ((after, context id), ...)
        self.ctx_flags: list[int] = [ENDS_ROOT, ESCAPES]                 # context id -> ENDS_ROOT | ESCAPES
        self._ctx_table: dict[tuple, int] = {meaning_key(ENDS_ROOT, ()): BOTTOM_ID, meaning_key(ESCAPES, ()): OPAQUE_ID}
        self._subst_memo: dict[tuple[int, int], int] = {}  # (opaque node's context, caller) -> context
        self._union_memo: dict[frozenset, int] = {}         # members -> their union
        self._members: dict[int, frozenset] = {}            # a union made by _union -> its members
        self._union_in: dict[frozenset, int] = {}           # contexts as given -> their union
        self._open_unions: set[int] = set()                 # unions whose returns are still being made

    def intern_context(self, key: tuple, returns: tuple, flags: int) -> tuple[int, bool]:
        """The context interned under ``key`` (made with ``returns`` and ``flags`` if new), and whether
        it is new (the caller then fills in its returns). The Earley walk's contexts use this."""
        ctx = self._ctx_table.get(key)
        if ctx is not None:
            return ctx, False
        ctx = self._ctx_table[key] = self._new_ctx(returns, flags)
        return ctx, True

    def _new_ctx(self, returns: tuple, flags: int) -> int:
        cid = len(self.ctx_returns)
        self.ctx_returns.append(returns)
        self.ctx_flags.append(flags)
        return cid

    def _subst(self, ctx: int, c: int) -> int:
        """``ctx`` (a context of an opaque node) with the OPAQUE caller replaced by ``c``.

        Made once per ``(ctx, c)``: its returns are ``ctx``'s with the substitution applied, plus
        ``c``'s own when ``ctx`` escapes to the unknown caller (then it takes ``c``'s flags too).
        The id is reserved before the returns are filled in, so cyclic contexts map to cycles.
        Once every context the substitution made is filled in, each one's returns to one place
        merge into one (``merge_items``): a union of contexts reads their returns, so it must not
        meet a context still being filled.
        """
        if ctx == OPAQUE_ID:
            return c
        s = self._subst_memo.get((ctx, c))
        if s is None:
            made: list[int] = []
            s = self._subst_fill(ctx, c, made)
            ctx_returns, merge = self.ctx_returns, self.merge_items
            for x in made:
                ctx_returns[x] = merge(ctx_returns[x])
        return s

    def _subst_fill(self, ctx: int, c: int, made: list) -> int:
        """Reserve a context per ``(context, c)`` pair reachable from ``ctx``, then fill in their
        returns (an explicit worklist: chains of contexts are as deep as chains of rules)."""
        if ctx == OPAQUE_ID:
            return c
        memo = self._subst_memo
        s = memo.get((ctx, c))
        if s is not None:
            return s
        ctx_flags, ctx_returns = self.ctx_flags, self.ctx_returns
        c_flags = ctx_flags[c]
        todo, new = [ctx], []
        while todo:
            x = todo.pop()
            if x == OPAQUE_ID or (x, c) in memo:
                continue
            flags = ctx_flags[x]
            memo[(x, c)] = self._new_ctx((), (flags & ~ESCAPES) | (c_flags if flags & ESCAPES else 0))
            new.append(x)
            todo.extend(c2 for _, c2 in ctx_returns[x])
        WORK.n += len(new)
        for x in new:
            s = memo[(x, c)]
            made.append(s)
            returns = {(after, c if c2 == OPAQUE_ID else memo[(c2, c)]) for after, c2 in ctx_returns[x]}
            if ctx_flags[x] & ESCAPES:
                returns.update(ctx_returns[c])
            ctx_returns[s] = tuple(sorted(returns))
        return memo[(ctx, c)]

    def merge_items(self, items) -> tuple:
        """One item per position, sorted: items at the same position merge their contexts into a union.

        ``(d, c1)`` and ``(d, c2)`` read the same input and, when the rule ends, return to both; so
        they are ``(d, c1 | c2)``. This keeps a state's size bounded by the grammar's positions even
        for infinitely ambiguous grammars such as ``S ::= S S | "a"``. A context's returns
        (``(after, context)`` pairs) merge the same way where they are made by substitution and
        union, so that the places a rule returns to stay bounded by the grammar too.
        """
        out = sorted(items)
        for i in range(1, len(out)):
            if out[i][0] == out[i - 1][0]:
                break
        else:                            # the usual case: every position once
            return tuple(out)
        by_pos: dict[int, dict[int, None]] = {}
        for d, c in out:
            by_pos.setdefault(d, {})[c] = None
        return tuple((d, next(iter(cs)) if len(cs) == 1 else self._union(list(cs))) for d, cs in by_pos.items())

    def _union(self, ctxs: list[int]) -> int:
        """The context that returns wherever any of ``ctxs`` does (made once per set of members).

        Returns of the members to one place merge into one return with the union of their
        contexts, and so on down (a worklist, not recursion: unions of long stacks are deep): each
        such union is a new context, its id reserved before its returns are made, so cycles close,
        and its members kept (``_members``): a union of unions is the union of their members, which
        is what it is interned by. A union whose returns go to distinct places is interned by
        meaning. Without the merge, ambiguous recursions (``root ::= r r``, ``r ::= "a" | "" |
        root* "a"``) doubled the returns of a context at every byte.
        """
        pending: list = []
        u = self._union_of(ctxs, pending)
        ctx_returns, open_ = self.ctx_returns, self._open_unions
        while pending:
            v, returns = pending.pop()
            WORK.n += len(returns) + 1
            by_after: dict[int, list[int]] = {}
            for after, c in returns:
                by_after.setdefault(after, []).append(c)
            ctx_returns[v] = tuple(sorted((after, cs[0] if len(cs) == 1 else self._union_of(cs, pending))
                                          for after, cs in by_after.items()))
            open_.discard(v)
        return u

    def _union_of(self, ctxs: list[int], pending: list) -> int:
        """The union of ``ctxs``; a new one whose returns are still to merge is put on ``pending``.

        Interned by the set of members (contexts that are not themselves such unions). Its returns
        are read from ``ctxs`` as given, where a union among them already has its returns merged
        (one per place, so a few): reading every member's instead costs as many members as the
        union has, which in infinitely ambiguous grammars grows with the input. Only a union whose
        returns are still being made (``_open_unions``) is read through its members.
        """
        key = frozenset(ctxs)
        u = self._union_in.get(key)
        if u is not None:
            return u
        members_of = self._members
        members: set = set()
        for c in key:
            members.update(members_of.get(c, (c,)))
        if len(members) == 1:
            u = self._union_in[key] = next(iter(members))
            return u
        mkey = frozenset(members)
        u = self._union_memo.get(mkey)
        if u is None:
            flags, returns, has_union = 0, set(), False
            ctx_flags, ctx_returns, open_ = self.ctx_flags, self.ctx_returns, self._open_unions
            for c in key:
                flags |= ctx_flags[c]
                if c in open_:
                    for m in members_of[c]:
                        returns.update(ctx_returns[m])
                else:
                    returns.update(ctx_returns[c])
                has_union = has_union or c in members_of
            # a union among the inputs returns twice to one place through its members: never by meaning
            if not has_union and len({after for after, _ in returns}) == len(returns):
                u = self._union_memo[mkey] = self.context_by_meaning(flags, returns)
            else:
                u = self._union_memo[mkey] = self._new_ctx((), flags)
                members_of[u] = mkey
                open_.add(u)
                pending.append((u, returns))
        self._union_in[key] = u
        return u

    def context_by_meaning(self, flags: int, returns) -> int:
        """The context that returns to ``returns`` (real contexts) with ``flags``, made if new."""
        key = meaning_key(flags, returns)
        ctx = self._ctx_table.get(key)
        if ctx is None:
            ctx = self._ctx_table[key] = self._new_ctx(key[2], flags)
        return ctx

