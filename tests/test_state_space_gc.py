"""A compiled grammar keeps its parser states cheap for Python's cyclic garbage collector.

Parser states and their memoised transitions live as long as the grammar, and a full collection
visits every reference they hold, wherever in the user's program that collection runs. So the work
per state must not grow with the grammar's number of byte classes (transitions kept as references
in a list per state, or position tables kept as lists, did: dozens of visits per state), and a state
should be about one tracked object: contexts held as objects made items, item tuples and interning
keys tracked too (5.4 tracked objects per state on this grammar; 2.9 with contexts as int ids).
"""
from __future__ import annotations

import gc
import random
import types

from halter import Grammar

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
         "uniform", "victor", "whiskey", "xray", "yankee", "zulu"]
WORDS += [w.capitalize() for w in WORDS]          # more distinct bytes: more byte classes
GBNF = ('root ::= item ("," item)*\nitem ::= word | "[" root "]"\n'
        "word ::= " + " | ".join(f'"{w}"' for w in WORDS) + "\n")
NOT_OWNED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def collector_work(root) -> tuple[int, int]:
    """(tracked objects reachable from ``root``, references the collector visits in them)."""
    seen, stack, objects, visits = set(), [root], 0, 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        objects += 1
        refs = gc.get_referents(obj)
        visits += len(refs)
        stack.extend(r for r in refs if gc.is_tracked(r) and not isinstance(r, NOT_OWNED))
    return objects, visits


def test_collector_work_per_state_does_not_grow_with_byte_classes():
    g = Grammar.from_gbnf(GBNF)
    rng = random.Random(0)
    for _ in range(30):
        m = g.matcher()
        text = ",".join(rng.choice(WORDS) if rng.random() < 0.8 else f"[{rng.choice(WORDS)}]"
                        for _ in range(20))
        assert m.accept_text(text)
    gc.collect()
    space = g._space
    n_states, n_classes = len(space.nodes), space.a.n_classes
    assert n_classes > 50 and n_states > 100
    objects, visits = collector_work(space)
    assert visits / n_states < 0.6 * n_classes, (visits, n_states, n_classes)
    assert objects / n_states < 3.5, (objects, n_states)
