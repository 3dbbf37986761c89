"""``TextMatcher``, the character matcher (``grammar.matcher()``): feed text or bytes, ask whether the
input so far may end here, roll back. The token matcher is ``token_matcher.TokenMatcher``."""
from __future__ import annotations

from halter.grammar.parser_state import Node, StateSpace
from halter.grammar.text_check import CheckTracker, TextCheck


class TextMatcher:
    """Incremental matcher over one grammar's parser states.

    ``accept_bytes``/``accept_text`` are atomic: on ``False`` the state is exactly as before. Input is
    bytes at heart, so a UTF-8 character split across calls works, and invalid UTF-8 is rejected.
    Copies are cheap (the state is one interned node plus a history list for ``rollback``). A
    grammar's ``TextCheck`` (e.g. JSON Schema's ``uniqueItems``) reads every accepted byte too, and
    input it refuses is refused.
    """

    __slots__ = ("_space", "_node", "_history", "_tracker", "_snaps")

    def __init__(self, space: StateSpace, node: Node | None = None, check: TextCheck | None = None) -> None:
        self._space = space
        self._node = space.initial if node is None else node
        self._history: list[Node] = []
        self._tracker: CheckTracker | None = check.tracker() if check is not None else None
        self._snaps: list = []

    def accept_bytes(self, data: bytes) -> bool:
        """Consume ``data``; return False (and change nothing) if the grammar cannot read it."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"accept_bytes takes bytes, not {type(data).__name__}")
        nxt = self._space.step_bytes(self._node, bytes(data))
        if nxt.id == 0:
            return False
        if data:
            if self._tracker is not None:
                snap = self._tracker.snapshot()
                if not self._tracker.feed(bytes(data)):
                    return False
                self._snaps.append(snap)
            self._history.append(self._node)
            self._node = nxt
        return True

    def accept_text(self, text: str) -> bool:
        """Consume ``text`` (encoded as UTF-8); atomic like ``accept_bytes``."""
        return self.accept_bytes(text.encode("utf-8", "surrogatepass"))

    def is_accepting(self) -> bool:
        """True when the input so far is a complete match of the root rule."""
        return self._node.accepting

    def can_continue(self) -> bool:
        """True when some more input could still be accepted."""
        return bool(self._node.scan or self._node.tok)

    def rollback(self, n_calls: int = 1) -> None:
        """Undo the last ``n_calls`` successful non-empty ``accept_*`` calls."""
        if n_calls < 0 or n_calls > len(self._history):
            raise ValueError(f"cannot roll back {n_calls} steps: only {len(self._history)} in history")
        for _ in range(n_calls):
            self._node = self._history.pop()
        if self._tracker is not None and n_calls:
            snap = self._snaps[-n_calls]
            del self._snaps[-n_calls:]
            self._tracker.restore(snap)

    def copy(self) -> "TextMatcher":
        m = TextMatcher(self._space, self._node)
        m._history = list(self._history)
        if self._tracker is not None:
            m._tracker, m._snaps = self._tracker.copy(), list(self._snaps)
        return m

    def reset(self) -> None:
        self._node = self._space.initial
        self._history.clear()
        if self._tracker is not None:
            self._tracker.restore(self._snaps[0] if self._snaps else self._tracker.snapshot())
            self._snaps.clear()

    def first_failure(self, data: bytes) -> int | None:
        """Byte offset of the first byte of ``data`` the grammar rejects from here (None if all pass)."""
        node, tracker = self._node, self._tracker
        snap = tracker.snapshot() if tracker is not None else None
        try:
            for i, b in enumerate(data):
                node = self._space.step_byte(node, b)
                if node.id == 0 or (tracker is not None and not tracker.feed(bytes((b,)))):
                    return i
            return None
        finally:
            if tracker is not None:
                tracker.restore(snap)

    @property
    def state_id(self) -> int:
        """A canonical id of the grammar state: equal ids mean identical futures (a grammar's
        ``TextCheck``, when it has one, is not part of it)."""
        return self._node.id
