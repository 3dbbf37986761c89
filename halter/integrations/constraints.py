"""Per-request constraints for serving engines: parse them, compile them once, share them.

Engines such as vLLM pass free-form per-request arguments (``SamplingParams.extra_args``; over
HTTP ``vllm_xargs``, whose values are strings, numbers or lists, never objects). A halter
constraint is read from them in one of two spellings::

    {"halter": {"json_schema": {...}}}      # or "grammar": GBNF text, or "regex": a pattern
    {"halter": "<the same object as JSON text>"}
    {"halter_json_schema": {...} or "<JSON text>"}   # or "halter_grammar", "halter_regex"

with an optional ``"options"`` object (``{"halter": {..., "options": {"strict": true}}}``; flat:
``"halter_options"``) passed to ``Grammar.from_json_schema`` / ``from_regex``. :class:`GrammarCache`
compiles each distinct constraint once per vocabulary, in a background thread, and hands every
request the same :class:`~halter.grammar.compiled.CompiledGrammar` (its matchers are independent).
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from halter.errors import ConstraintError

__all__ = ["ConstraintError", "Constraint", "parse_constraint", "GrammarCache", "KINDS"]

KINDS = ("json_schema", "grammar", "regex")


@dataclass(frozen=True)
class Constraint:
    """One request's constraint: ``kind`` is one of :data:`KINDS`; ``source`` is the schema as
    canonical JSON text, the GBNF text or the regex; ``options`` canonical JSON of the options."""

    kind: str
    source: str
    options: str = "{}"

    def build(self) -> Any:
        """The :class:`~halter.grammar.Grammar` (raises halter's typed errors on bad input)."""
        from halter.grammar import Grammar
        options = json.loads(self.options)
        if self.kind == "json_schema":
            return Grammar.from_json_schema(json.loads(self.source), **options)
        if self.kind == "regex":
            return Grammar.from_regex(self.source, **options)
        if options:
            raise ConstraintError("halter: 'options' apply to json_schema and regex, not to a GBNF grammar")
        return Grammar.from_gbnf(self.source)


def _json_value(value: Any, where: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ConstraintError(f"{where} is not valid JSON: {exc}") from None
    return value


def _constraint(kind: str, value: Any, options: Any, where: str) -> Constraint:
    if kind == "json_schema":
        schema = _json_value(value, where)
        if not isinstance(schema, (dict, bool)):
            raise ConstraintError(f"{where} must be a JSON Schema (an object or a boolean), "
                                  f"got {type(schema).__name__}")
        source = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    else:
        if not isinstance(value, str):
            raise ConstraintError(f"{where} must be a string, got {type(value).__name__}")
        source = value
    options = _json_value(options, f"{where} options") if options is not None else {}
    if not isinstance(options, dict):
        raise ConstraintError(f"{where} options must be an object, got {type(options).__name__}")
    return Constraint(kind, source, json.dumps(options, sort_keys=True, separators=(",", ":")))


def parse_constraint(extra_args: Mapping[str, Any] | None) -> Constraint | None:
    """The halter constraint in an engine's per-request arguments, or None when there is none."""
    if not extra_args:
        return None
    if not isinstance(extra_args, Mapping):
        raise ConstraintError(f"extra arguments must be a mapping, got {type(extra_args).__name__}")
    found: list[Constraint] = []
    if "halter" in extra_args:
        spec = _json_value(extra_args["halter"], "'halter'")
        if not isinstance(spec, dict):
            raise ConstraintError(f"'halter' must be an object (or its JSON text) with one of "
                                  f"{', '.join(KINDS)}; got {type(spec).__name__}")
        unknown = set(spec) - {*KINDS, "options"}
        if unknown:
            raise ConstraintError(f"'halter' has unknown keys {sorted(unknown)}; "
                                  f"expected one of {', '.join(KINDS)} (and 'options')")
        kinds = [k for k in KINDS if k in spec]
        if len(kinds) != 1:
            raise ConstraintError(f"'halter' needs exactly one of {', '.join(KINDS)}; got "
                                  f"{kinds or 'none'}")
        found.append(_constraint(kinds[0], spec[kinds[0]], spec.get("options"), f"'halter.{kinds[0]}'"))
    for kind in KINDS:
        key = f"halter_{kind}"
        if key in extra_args:
            found.append(_constraint(kind, extra_args[key], extra_args.get("halter_options"), f"'{key}'"))
    if "halter_options" in extra_args and not any(f"halter_{k}" in extra_args for k in KINDS):
        raise ConstraintError("'halter_options' given without halter_json_schema, halter_grammar "
                              "or halter_regex")
    if len(found) > 1:
        raise ConstraintError("a request may carry one halter constraint; got "
                              f"{', '.join(c.kind for c in found)}")
    return found[0] if found else None


class GrammarCache:
    """Compiled grammars keyed by (vocabulary, constraint): each compiled once, then shared.

    ``submit`` returns a ``Future``; requests asking for the same constraint while it compiles
    share that future. Compilation runs on ``workers`` background threads, so it overlaps the
    model's forward pass. At most ``max_entries`` compiled grammars are kept (least recently used
    dropped first); a failed compilation is not kept, so its error reaches every waiting request
    and a later request tries again. Safe to call from any thread.
    """

    def __init__(self, *, workers: int = 1, max_entries: int = 256) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, Constraint], Future] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="halter-compile")
        self.compiled = 0          # compilations started (cache misses)

    def submit(self, constraint: Constraint, vocab: Any | Callable[[], Any], *,
               vocab_key: str | None = None) -> Future:
        """The compiled grammar for ``constraint``, as a future. ``vocab`` is a Vocabulary, or a
        function returning one (called on the worker thread, so a vocabulary is built only when
        first needed) together with ``vocab_key``, a string naming that vocabulary."""
        if vocab_key is None:
            if not hasattr(vocab, "fingerprint"):
                raise TypeError("GrammarCache.submit: a vocabulary loader needs a vocab_key")
            vocab_key = vocab.fingerprint()
        key = (vocab_key, constraint)
        with self._lock:
            fut = self._entries.get(key)
            if fut is not None and not (fut.done() and fut.exception() is not None):
                self._entries.move_to_end(key)
                return fut
            fut = self._pool.submit(self._compile, constraint, vocab)
            self._entries[key] = fut
            self.compiled += 1
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        fut.add_done_callback(lambda f, k=key: self._forget_failure(k, f))
        return fut

    def get(self, constraint: Constraint, vocab: Any | Callable[[], Any], *,
            vocab_key: str | None = None) -> Any:
        """The compiled grammar, blocking until it is ready (raises the compilation's error)."""
        return self.submit(constraint, vocab, vocab_key=vocab_key).result()

    @staticmethod
    def _compile(constraint: Constraint, vocab: Any) -> Any:
        import time
        t0 = time.perf_counter()
        if not hasattr(vocab, "fingerprint"):
            vocab = vocab()
        compiled = constraint.build().compile(vocab)
        compiled.request_compile_seconds = time.perf_counter() - t0   # build + compile, for benches
        return compiled

    def _forget_failure(self, key: tuple[str, Constraint], fut: Future) -> None:
        if fut.exception() is not None:
            with self._lock:
                if self._entries.get(key) is fut:
                    del self._entries[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
