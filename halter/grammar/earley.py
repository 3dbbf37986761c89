"""The Earley closure of a kernel of items: predict called rules, complete ended ones, intern contexts.

This is the general way to close a set of items (``parser_state.py`` has the data layout). It walks
every item the kernel reaches: a call predicts the callee's start with a *local* context (written
``~rule``, < 0, while the walk runs), an item at a rule's end completes into the places its context
returns to. When the walk is done the local contexts the kept items need are interned
(``_resolver``), by what they return to, so that states of ambiguous and recursive grammars stay
bounded by the grammar. ``StateSpace.closure`` runs it for kernels whose caller is unknown (the
OPAQUE context: the opaque node of each position) and builds the other closures from those nodes,
save chains of completions too deep or cyclic for that, which come back here. The walk uses the
space's public interface only: the automata (``a``), ``tail_returns``, the context tables
(``ctx_returns``, ``ctx_flags``, ``intern_context``, ``context_by_meaning``) and ``merge_items`` /
``intern_node`` to make the node. ``opaque_by_calls`` spares the walk for a position that makes
the same calls as one walked before (its memo, ``_call_rest``, is the space's).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from halter.grammar.contexts import ENDS_ROOT, ESCAPES, OPAQUE_ID, WORK, same_context
from halter.grammar.graphs import strongly_connected_components

if TYPE_CHECKING:
    from halter.grammar.parser_state import Node, StateSpace


def earley_closure(space: "StateSpace", kernel) -> "Node":
    """The interned node for the Earley closure (predict + complete) of ``kernel`` items.

    Kernel items carry context ids (>= 0); a rule predicted here gets a *local* context, written
    ``~rule`` (< 0) until the closure is done, then interned (``_resolver``).
    """
    a = space.a
    calls, accepting_pos, nullable, start, tail = a.calls, a.accepting, a.nullable, a.start, space.tail_returns
    ctx_returns, ctx_flags = space.ctx_returns, space.ctx_flags
    seen: set = set()
    waiting: dict[int, set] = {}     # local ref -> places its rule returns to
    aliases: dict[int, set] = {}     # local ref -> contexts it was tail-called in: it returns where they do
    work = list(kernel)
    root_done = escaped = False
    steps = 0
    while work:
        item = work.pop()
        steps += 1
        if item in seen:
            continue
        seen.add(item)
        d, ref = item
        for rule, after in calls[d]:
            local = ~rule
            w = waiting.get(local)
            if w is None:
                w = waiting[local] = set()
                work.append((start[rule], local))
            ret = (after, ref)
            if tail[after]:
                aliases.setdefault(local, set()).add(ref)
                if nullable[rule]:
                    work.append(ret)
            elif ret not in w:
                w.add(ret)
                if nullable[rule]:
                    work.append(ret)
        if accepting_pos[d] and ref >= 0:   # (a local ref: an empty match, see nullable)
            flags = ctx_flags[ref]
            if flags:
                root_done = root_done or bool(flags & ENDS_ROOT)
                escaped = escaped or bool(flags & ESCAPES)
            work.extend(ctx_returns[ref])
    WORK.n += steps
    has_bytes, tokens = a.has_bytes, a.tokens
    scan_raw = [it for it in seen if has_bytes[it[0]]]
    tok_raw = [it for it in seen if tokens[it[0]]]
    if not scan_raw and not tok_raw and not root_done and not escaped:
        return space.dead
    resolve = _resolver(space, waiting, aliases, scan_raw, tok_raw)
    scan = space.merge_items((d, resolve(r)) for d, r in scan_raw)
    tok = space.merge_items((d, resolve(r)) for d, r in tok_raw)
    return space.intern_node(scan, tok, root_done, escaped)


def _resolver(space: "StateSpace", waiting: dict[int, set], aliases: dict[int, set], scan_raw: list, tok_raw: list):
    """Intern the local contexts the kept items need; return ref -> context id.

    A rule's context is where it returns: the ``waiting`` places, plus — for each context it
    was tail-called in (``aliases``: the call was the caller's last step) — wherever that one
    returns, so loops written as right recursion (``items ::= "," item items | "]"``) keep one
    context instead of growing the stack by a level per round.
    """
    if not aliases:                  # the common case: one local rule, returning to real contexts
        local = {r for _, r in scan_raw if r < 0}
        local.update(r for _, r in tok_raw if r < 0)
        if not local:
            return same_context
        if len(local) == 1:
            (r,) = local
            returns = waiting[r]
            if all(ref >= 0 for _, ref in returns):
                sig = tuple(sorted(returns))
                key = (r, ((r, (0, sig)),))          # the key the general path below makes
                ctx = space.intern_context(key, sig, 0)[0]
                return lambda ref: ctx if ref < 0 else ref
    ctx_returns, ctx_flags = space.ctx_returns, space.ctx_flags
    needed: list[int] = []
    seen_rules: set[int] = set()
    eff: dict[int, set] = {}
    eff_flags: dict[int, int] = {}
    sole: dict[int, int] = {}
    tails: dict[int, tuple] = {}
    stack = [r for _, r in scan_raw if r < 0] + [r for _, r in tok_raw if r < 0]
    while stack:
        r = stack.pop()
        if r in seen_rules:
            continue
        seen_rules.add(r)
        needed.append(r)
        if r in aliases:                   # follow tail calls through local rules, then to real contexts
            returns, flags, real, waits = _tail_info(r, waiting, aliases, tails, ctx_returns, ctx_flags)
            if len(real) == 1 and not waits:
                sole[r] = next(iter(real))  # only ever tail-called: it returns where its caller does
        else:
            returns, flags = waiting[r], 0
        eff[r], eff_flags[r] = returns, flags
        stack.extend(ref for _, ref in returns if ref < 0)
    if not needed:
        return same_context
    # Intern callees before callers, a strongly connected group of local contexts at a time (so
    # the work is linear in the locals, however long a chain of rules calls one another): an
    # acyclic local by the ids its returns resolved to, a cyclic group by its members' returns.
    resolved: dict[int, int] = {}
    for r in needed:
        if r in sole:
            resolved[r] = sole[r]
        elif r in aliases and all(ref >= 0 for _, ref in eff[r]):
            resolved[r] = space.context_by_meaning(eff_flags[r], eff[r])

    def callees(r: int) -> list[int]:
        return [] if r in resolved else [ref for _, ref in eff[r] if ref < 0]

    for group in strongly_connected_components(needed, callees):
        if group[0] in resolved:
            continue
        members = set(group)
        if len(group) == 1 and not any(ref == group[0] for _, ref in eff[group[0]]):
            r = group[0]
            sig = tuple(sorted({(after, resolved[ref] if ref < 0 else ref) for after, ref in eff[r]}))
            resolved[r] = space.intern_context((r, ((r, (eff_flags[r], sig)),)), sig, eff_flags[r])[0]
            continue
        sigs = {x: (eff_flags[x], tuple(sorted({(after, ref if ref in members else resolved[ref] if ref < 0 else ref)
                                                 for after, ref in eff[x]})))
                for x in group}
        shape = tuple(sorted(sigs.items()))
        fresh = []
        for r in group:
            ctx, new = space.intern_context((r, shape), (), eff_flags[r])
            if new:
                fresh.append(r)
            resolved[r] = ctx
        for r in fresh:
            ctx_returns[resolved[r]] = tuple(sorted({(after, resolved[ref] if ref < 0 else ref) for after, ref in eff[r]}))
    return lambda ref: resolved[ref] if ref < 0 else ref


def _tail_info(r: int, waiting: dict, aliases: dict, tails: dict, ctx_returns: list, ctx_flags: list) -> tuple:
    """(returns, flags, real contexts, any waiting) of local ``r`` with its tail calls followed:
    the places every local reachable through ``aliases`` returns to, and the real contexts reached
    (their returns and flags included). Memoised in ``tails`` per strongly connected group of
    aliases, sharing a callee's sets where a group adds nothing, so a chain of thousands of
    tail calls costs linear time. The sets returned are shared: never change them."""
    hit = tails.get(r)
    if hit is not None:
        return hit

    def succ(x: int) -> list[int]:
        return [y for y in aliases.get(x, ()) if y < 0 and y not in tails]

    for group in strongly_connected_components([r], succ):
        members = set(group)
        own = [w for x in group for w in (waiting[x],) if w]
        real_new = {y for x in group for y in aliases.get(x, ()) if y >= 0}
        below = list({id(i): i for x in group for y in aliases.get(x, ()) if y < 0 and y not in members
                      for i in (tails[y],)}.values())
        if not own and not real_new and len(below) == 1:
            info = below[0]
        else:
            returns: set = set()
            flags, real, waits = 0, set(real_new), bool(own)
            for w in own:
                returns.update(w)
            for b_returns, b_flags, b_real, b_waits in below:
                returns.update(b_returns)
                flags |= b_flags
                real.update(b_real)
                waits = waits or b_waits
            for y in real_new:
                returns.update(ctx_returns[y])
                flags |= ctx_flags[y]
            info = (returns, flags, real, waits)
        for x in group:
            tails[x] = info
    return tails[r]


def opaque_by_calls(space: "StateSpace", d: int) -> "Node | None":
    """The opaque node of ``d`` (which calls rules, none of which can match empty) from that of
    another position making the same calls, or None (then the Earley walk runs). Memoised in the
    space's ``_call_rest`` per tuple of calls; ``StateSpace._closure`` asks it first.

    With no callee that can end at once, the closure of ``(d, OPAQUE)`` is that item plus
    what its calls predict, which depends on the calls alone (callees' starts, contexts made of
    the ``after`` positions): the positions of a JSON key's complement or of a string's counts
    make the same calls one after another. The first such position's walk is split into its
    own item and the rest, kept when it is exactly that (its own item once, with the OPAQUE
    context; the node escaping just where ``d`` may end)."""
    a = space.a
    calls = a.calls[d]
    rest = space._call_rest.get(calls)
    if rest is None:
        if any(a.nullable[r] for r, _ in calls):
            space._call_rest[calls] = False
            return None
        node = earley_closure(space, [(d, OPAQUE_ID)])
        scan = tuple(it for it in node.scan if it[0] != d)
        tok = tuple(it for it in node.tok if it[0] != d)
        own = (d, OPAQUE_ID)
        exact = (len(node.scan) - len(scan) == (own in node.scan) == bool(a.has_bytes[d])
                 and len(node.tok) - len(tok) == (own in node.tok) == bool(a.tokens[d])
                 and not node.accepting and node.escaped == bool(a.accepting[d]))
        space._call_rest[calls] = (scan, tok) if exact else False
        return node
    if rest is False:
        return None
    scan, tok = rest
    if any(x == d for x, _ in scan) or any(x == d for x, _ in tok):
        return None
    own = (d, OPAQUE_ID)
    return space.intern_node(tuple(sorted(scan + (own,))) if a.has_bytes[d] else scan,
                            tuple(sorted(tok + (own,))) if a.tokens[d] else tok, False, bool(a.accepting[d]))

