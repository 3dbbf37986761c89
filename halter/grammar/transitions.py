"""Transitions as the vectorised trie walks read them: a 2-D ``table[state id, byte class] -> state id``.

The table is the parser states' own memo of transitions (``StateSpace.transitions``, each node's
``next`` is a view of its row): what byte-by-byte stepping learns, the walks read, and the other way
round. ``TransitionTable`` adds what the walks (``trie_walk.py``, ``trie_kernel.py``) need on top:
stepping whole arrays of (state, class) pairs at once, computing the missing ones through
``StateSpace.step_class``, and filling in, when a state is first walked, the classes none of its
items can read.
"""
from __future__ import annotations

import numpy as np

from halter.grammar.parser_state import OPAQUE_ID, Node, StateSpace
from halter.grammar.array_sets import sorted_unique


SMALL = 32
"""``step`` on at most this many pairs runs one pair at a time."""


class TransitionTable:
    """Vectorised access to a state space's transition table; -1 = not computed yet."""

    def __init__(self, space: StateSpace) -> None:
        self.space = space
        self.n_classes = space.a.n_classes
        self.class_of = np.asarray(space.class_of, dtype=np.int64)
        self._dead: dict[int, np.ndarray] = {}         # position -> classes it cannot read
        self._dead_sets: dict[tuple, np.ndarray] = {}  # positions -> classes none of them reads
        self._registered = bytearray()                # state -> its dead classes are filled in
        self._next_pos: np.ndarray | None = None       # next_array, copied when first needed
        self.opaque_ids = np.full(space.a.n_positions, -1, dtype=np.int32)  # position -> its opaque node, registered

    @property
    def table(self) -> np.ndarray:
        """``[state id, byte class] -> state id`` (the space's; a new array after the space grows)."""
        return self.space.transitions

    @property
    def escaped(self) -> np.ndarray:
        """State id -> its ``escaped`` flag."""
        return self.space.state_escaped

    @property
    def single_pos(self) -> np.ndarray:
        """State id -> its one position when it is that position with an unknown caller, else -1."""
        return self.space.state_single_pos

    def reserve(self, n: int) -> None:
        """Make room for state ids below ``n`` now, so that decoding does not pause to copy the table."""
        self.space.reserve(n)

    def register(self, node: Node) -> None:
        """Make room for ``node`` and fill in, at once, the byte classes none of its items can read
        (most of them): walks then only ever compute the transitions that lead somewhere."""
        nid = node.id
        if nid < len(self._registered) and self._registered[nid]:
            return
        if nid >= len(self._registered):
            self._registered.extend(bytes(max(nid + 1, 2 * len(self._registered)) - len(self._registered)))
        self._registered[nid] = 1
        row = self.table[nid]
        if nid != 0:
            scan = node.scan
            if not scan:
                row[:] = 0
            elif len(scan) == 1:
                row[self._position_dead(scan[0][0])] = 0
            else:
                ds = tuple(d for d, _ in scan)           # states differing by contexts alone share it
                dead = self._dead_sets.get(ds)
                if dead is None:
                    dead = self._dead_sets[ds] = np.logical_and.reduce([self._position_dead(d) for d in ds])
                row[dead] = 0
                self._single_with_calls(node)

    def _single_with_calls(self, node: Node) -> None:
        """Let walks step a position's opaque node that holds more than the position's own item
        (what the position calls: a bounded repeat's body called per count, ``repeats.py``) by
        position, like a one-item node: on a class only the position's item reads, the next state is
        the next position's opaque node (the called items read nothing there and drop out). The
        classes other items read are marked -2 in the position's ``next_positions`` row (stepped
        the ordinary way); a row is only read for the states whose ``single_pos`` it is."""
        own = [d for d, c in node.scan if c == OPAQUE_ID]
        if len(own) != 1 or self.space._opaque_nodes.get(own[0]) is not node:
            return
        d = own[0]
        others = np.logical_or.reduce([~self._position_dead(x) for x, _ in node.scan if x != d])
        self.next_positions()[d, others] = -2
        self.single_pos[node.id] = d

    def _position_dead(self, d: int) -> np.ndarray:
        dead = self._dead.get(d)
        if dead is None:
            dead = self._dead[d] = self.space.a.next_array[d] < 0
        return dead

    def next_positions(self) -> np.ndarray:
        """The automata's ``next_array`` (int32 ``[position, class]``, -1: no transition), copied:
        ``-2`` marks what ``_single_with_calls`` leaves to ordinary stepping."""
        if self._next_pos is None:
            self._next_pos = np.array(self.space.a.next_array, dtype=np.int32)
        return self._next_pos

    def step(self, states: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Next state for each (state, class) pair, computing unknown transitions on the way.

        A state that is one position with an unknown caller (most states of the compile-time
        walks) steps to the opaque node of the next position: those are looked up together, and
        only positions met for the first time build a node.
        """
        if len(states) <= SMALL:
            return self._step_few(states, classes)
        nxt = self.table[states, classes]
        unknown = nxt < 0
        few = np.flatnonzero(unknown) if unknown.any() else ()
        if 0 < len(few) <= SMALL:            # a few unknown among many known: one at a time
            for i, s, c in zip(few.tolist(), states[few].tolist(), classes[few].tolist()):
                nxt[i] = self._step_one(s, c)
            return nxt
        if len(few):
            us, uc = states[unknown], classes[unknown]
            pos = self.single_pos[us]
            single = pos >= 0
            if single.any():
                target = self.next_positions()[pos[single], uc[single]]      # -1: a dead class
                if (target == -2).any():          # another item reads the class: stepped below
                    single[np.flatnonzero(single)[target == -2]] = False
                    target = target[target != -2]
                live = target >= 0
                ids = self.opaque_ids[target[live]]
                for t in sorted_unique(target[live][ids < 0]).tolist():
                    node = self.space.opaque_node(t)
                    self.register(node)
                    self.opaque_ids[t] = node.id
                ids = np.zeros(len(target), dtype=np.int32)
                ids[live] = self.opaque_ids[target[live]]
                self.table[us[single], uc[single]] = ids
                us, uc = us[~single], uc[~single]
            nodes = self.space.nodes
            for p in sorted_unique(us.astype(np.int64) * self.n_classes + uc).tolist():
                s, c = divmod(p, self.n_classes)
                self.register(self.space.step_class(nodes[s], c))     # (step_class writes the table)
            nxt = self.table[states, classes]
        return nxt

    def _step_few(self, states: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """``step`` for a few pairs, one at a time (array operations cost more than they save here)."""
        out = np.empty(len(states), dtype=np.int32)
        for i, (s, c) in enumerate(zip(states.tolist(), classes.tolist())):
            out[i] = self._step_one(s, c)
        return out

    def _step_one(self, s: int, c: int) -> int:
        """The transition of state ``s`` on class ``c``, computed and stored if unknown (as ``step``)."""
        nid = int(self.table[s, c])
        if nid >= 0:                         # (an earlier pair of the same call made it)
            return nid
        pos = int(self.single_pos[s])
        if pos >= 0:
            target = int(self.next_positions()[pos, c])
            if target != -2:                 # -2: another item reads the class, stepped below
                nid = 0
                if target >= 0:
                    nid = int(self.opaque_ids[target])
                    if nid < 0:
                        node = self.space.opaque_node(target)
                        self.register(node)
                        nid = self.opaque_ids[target] = node.id
                self.table[s, c] = nid
                return nid
        self.register(self.space.step_class(self.space.nodes[s], c))    # (step_class writes the table)
        return int(self.table[s, c])
