"""``Grammar``: a parsed, checked grammar; the entry point from GBNF, JSON Schema, regex or Python types."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halter.errors import GrammarError, SchemaError
from halter.grammar.ast import Expr, RuleSet, format_grammar, has_token_refs
from halter.grammar.automaton import NeverMatches, RuleAutomata, RuleTooComplex, build_automata
from halter.grammar.gbnf_parser import check_references, parse_gbnf
from halter.grammar.matcher import GrammarMatcher
from halter.grammar.parser_state import StateSpace

if TYPE_CHECKING:
    from halter.grammar.compiled import CompiledGrammar
    from halter.grammar.text_check import TextCheck
    from halter.vocab.vocabulary import Vocabulary


class Grammar:
    """A context-free grammar ready to match text or be compiled for a vocabulary.

    Build one with ``Grammar.from_gbnf(text)`` (or ``from_json_schema``, ``from_regex``,
    ``from_pydantic``, ``from_type``). ``str(grammar)`` is normalized GBNF.
    """

    def __init__(self, rules: dict[str, Expr], root: str = "root", *, _text: str | None = None,
                 _automata: RuleAutomata | None = None, _check: "TextCheck | None" = None,
                 _positions: dict[str, tuple[int, int]] | None = None) -> None:
        rs = RuleSet(dict(rules))
        self.text_check: TextCheck | None = _check     # a condition beside the grammar (uniqueItems)
        #: the ``GrammarWarning``s parsing raised (GBNF only): traps llama.cpp accepts, departures
        self.warnings: list = []
        check_references(rs, root, _text)
        self.rules: dict[str, Expr] = rs.rules
        self.root = root
        if _automata is None:
            try:
                _automata = build_automata(self.rules, root)
            except RuleTooComplex as err:
                # where the rule is defined (its source rule's, for an auxiliary "x--repeat-3")
                where = (_positions or {}).get((err.rule or "").split("--")[0])
                if err.line is not None or where is None or _text is None:
                    raise
                raise RuleTooComplex(err.message, *where, _text, rule=err.rule) from None
            except GrammarError as err:
                if err.line is None or _text is None:
                    raise
                raise type(err)(err.message, err.line, err.column, _text) from None   # (keeps NeverMatches...)
        self._automata: RuleAutomata = _automata
        self._space = StateSpace(self._automata)
        self._has_token_refs = any(has_token_refs(self.rules[n]) for n in self._automata.rule_names
                                   if n in self.rules)

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def from_gbnf(cls, text: str, root: str = "root") -> "Grammar":
        """Parse llama.cpp GBNF; raise ``GrammarError`` (with ``.line``/``.column``) on bad input."""
        import warnings

        from halter.errors import GrammarWarning
        cached = _load_cached(text, root)
        if cached is not None:
            for message, line, column, kind in cached[2] or ():
                warnings.warn(GrammarWarning(message, line, column, kind), stacklevel=2)
            return cls(cached[0], root, _automata=cached[1])
        rs = parse_gbnf(text)
        check_references(rs, root, text)
        grammar = cls(rs.rules, root, _text=text, _positions=rs.positions)
        from halter.grammar.gbnf_checks import dead_end_warnings
        found = rs.warnings + dead_end_warnings(rs.rules, root, rs.positions)
        found.sort(key=lambda w: (w[1], w[2]))
        for message, line, column, kind in found:
            warnings.warn(GrammarWarning(message, line, column, kind), stacklevel=2)
        grammar.warnings = [GrammarWarning(*w) for w in found]
        _store_cached(text, root, grammar, found)
        return grammar

    @classmethod
    def from_json_schema(cls, schema: Any, **options: Any) -> "Grammar":
        """A grammar accepting exactly the JSON texts valid under ``schema`` (see ``json_schema_to_gbnf``).

        The converter's syntax trees are used directly (no GBNF text round trip), and the built
        grammar is cached on disk by the schema's canonical JSON and the options; warnings the
        converter raised are raised again on a cache hit. ``uniqueItems`` over open item sets (not
        context-free) is enforced by a check that runs beside the grammar in both matchers and in
        token masks (``grammar.text_check``); ``str(grammar)``, plain GBNF, cannot carry it.
        """
        from halter.limits import deep_call
        return deep_call(cls._from_json_schema, schema, where="the JSON Schema", **options)

    @classmethod
    def _from_json_schema(cls, schema: Any, **options: Any) -> "Grammar":
        import copy
        import json
        import warnings

        from halter.schemas.converter import _draft_of
        from halter.schemas.json_schema import schema_to_grammar_parts
        from halter.schemas.unique_check import UniqueItemsCheck
        try:
            loaded = schema if not isinstance(schema, str) else json.loads(schema)
            key = "json-schema\0" + json.dumps([loaded, options], sort_keys=True) + "\0" + _converter_version()
        except (TypeError, ValueError):
            key = None
        cached = _load_cached(key, "root") if key is not None else None
        if cached is not None:
            rules, automata, (caught, checked) = cached
            for message, category in caught:
                warnings.warn(message, category, stacklevel=2)
            check = UniqueItemsCheck(copy.deepcopy(loaded), _draft_of(loaded)) if checked else None
            return cls(rules, "root", _automata=automata, _check=check)
        for split in (False, True):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                rules, check = schema_to_grammar_parts(schema, split_patterns=split, **options)
            try:
                grammar = cls(rules, "root", _check=check)
                break
            except NeverMatches:        # e.g. a required property whose schema is the object itself
                raise SchemaError("the schema accepts no value at all (no finite JSON text fits it)", "#") from None
            except RuleTooComplex:      # a pattern's automaton: spell the patterns with rules
                if split:
                    raise
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=2)
        if key is not None:
            _store_cached(key, "root", grammar, ([(str(w.message), w.category) for w in caught], check is not None),
                          force=True)
        return grammar

    @classmethod
    def from_regex(cls, pattern: str, **options: Any) -> "Grammar":
        """A grammar accepting exactly the strings that fully match ``pattern``.

        A pattern whose single automaton grows too large (nested repeats) is built again with
        a rule per repeated group (``regex_to_gbnf(split_groups=True)``).
        """
        from halter.schemas import regex_to_gbnf
        try:
            try:
                return cls.from_gbnf(regex_to_gbnf(pattern, **options))
            except RuleTooComplex:
                if options.get("split_groups"):
                    raise
            return cls.from_gbnf(regex_to_gbnf(pattern, **{**options, "split_groups": True}))
        except NeverMatches:
            raise NeverMatches(f"the regex {pattern!r} matches no string") from None

    @classmethod
    def from_pydantic(cls, model: type, **options: Any) -> "Grammar":
        """A grammar for the JSON form of a Pydantic model class.

        Built from the model's JSON Schema with ``target="pydantic"`` and ``closed_objects=True``
        (unless ``options`` say otherwise): what the grammar accepts, ``model.model_validate_json``
        takes, as far as the schema tells (no lone surrogate escapes, dates Python can hold,
        Pydantic's own formats, http-only URLs and naive datetimes:
        ``schemas.pytypes.pydantic_grammar_schema``), and objects have only the model's fields,
        as its ``model_dump_json`` writes them (a model with ``extra="allow"`` says so in its schema).
        This is what ``generate(output_type=model)`` uses.
        """
        from halter.schemas.pytypes import pydantic_grammar_schema, require_model
        schema = pydantic_grammar_schema(require_model(model))
        return cls.from_json_schema(schema, **{"target": "pydantic", "closed_objects": True, **options})

    @classmethod
    def from_type(cls, tp: Any, **options: Any) -> "Grammar":
        """A grammar for the JSON form of a Python type (``int``, ``list[str]``, ``Literal[...]``, ...).

        Like ``from_pydantic``: ``target="pydantic"`` and ``closed_objects=True`` by default.
        """
        from halter.schemas import type_to_json_schema
        return cls.from_json_schema(type_to_json_schema(tp), **{"target": "pydantic", "closed_objects": True, **options})

    # -- matching ----------------------------------------------------------------------------
    def matcher(self) -> GrammarMatcher:
        """A fresh character matcher at the start of the grammar."""
        if self._has_token_refs:
            raise GrammarError("this grammar uses token references (<[id]>, <text>), which match tokens, "
                               "not text: compile it for a vocabulary (grammar.compile(vocab)) and use "
                               "the token matcher")
        return GrammarMatcher(self._space, check=self.text_check)

    def matches(self, text: str | bytes) -> bool:
        """True when the whole of ``text`` matches the root rule."""
        m = self.matcher()
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        return m.accept_bytes(data) and m.is_accepting()

    def compile(self, vocab: "Vocabulary", *, cache: bool = True, progress: bool | None = None) -> "CompiledGrammar":
        """Compile for ``vocab``: token tables are built per grammar position the first time a
        matcher needs them (``cg.store()`` keeps them in halter's cache for later processes).

        With ``cache`` (the default) a second call for the same vocabulary returns the same
        ``CompiledGrammar``, so masks computed at run time by earlier generations are reused
        (matchers are independent; the compiled grammar only memoises). ``cache=False`` builds
        afresh and touches neither cache.
        """
        from halter.grammar.compiled import compile_grammar
        from halter.vocab.vocabulary import Vocabulary
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"compile() takes a halter.Vocabulary, not {type(vocab).__name__}: build one with "
                            "Vocabulary.from_gguf(path) or Vocabulary.from_token_bytes([...])")
        if not cache:
            with self._space.lock:
                return compile_grammar(self, vocab, cache=False, progress=progress)
        per_vocab = self.__dict__.setdefault("_compiled", {})
        key = vocab.fingerprint()
        cg = per_vocab.get(key)
        if cg is None:
            with self._space.lock:               # threads compiling at once share one result
                cg = per_vocab.get(key)
                if cg is None:
                    cg = per_vocab[key] = compile_grammar(self, vocab, cache=True, progress=progress)
        return cg

    # -- presentation ------------------------------------------------------------------------
    def __str__(self) -> str:
        text = self.__dict__.get("_text_cache")
        if text is None:
            text = self.__dict__["_text_cache"] = format_grammar(self.rules)
        return text

    def __repr__(self) -> str:
        return (f"<Grammar root={self.root!r} rules={len(self.rules)} "
                f"positions={self._automata.n_positions}>")


# -- on-disk cache of parsed grammars (rules and automata), keyed by the exact source text ---------


def _cache_path(text: str, root: str):
    import hashlib

    from halter import cache
    from halter.grammar.automaton import AUTOMATON_VERSION
    key = hashlib.sha256(f"{AUTOMATON_VERSION}\0{root}\0{text}".encode("utf-8", "surrogatepass"))
    return cache.path("grammars", key.hexdigest()[:32], ".pickle")


def _load_cached(text: str, root: str):
    """(rules, automata, extra) stored under ``text`` (a grammar source or a schema key), or None."""
    from halter import cache
    stored = cache.load_pickle(_cache_path(text, root))
    if not (isinstance(stored, tuple) and len(stored) == 3):
        return None
    return stored


def _store_cached(text: str, root: str, grammar: Grammar, extra: object = None, force: bool = False) -> None:
    from halter import cache
    if len(text) < 2000 and not force:          # small grammars build faster than a file is read
        return
    cache.store_pickle(_cache_path(text, root), (grammar.rules, grammar._automata, extra))


def _converter_version() -> str:
    """A hash of the schema converter's source, so its cached output is dropped when it changes."""
    global _CONVERTER_VERSION
    if _CONVERTER_VERSION is None:
        import hashlib
        from pathlib import Path

        import halter.schemas
        h = hashlib.sha256()
        for path in sorted(Path(halter.schemas.__file__).parent.glob("*.py")):
            h.update(path.read_bytes())
        _CONVERTER_VERSION = h.hexdigest()[:16]
    return _CONVERTER_VERSION


_CONVERTER_VERSION: str | None = None
