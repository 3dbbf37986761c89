"""``Grammar``: a parsed, checked grammar; the entry point from GBNF, JSON Schema, regex or Python types."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from halter import gc_pause
from halter.errors import GrammarError
from halter.grammar.ast import Expr, RuleSet
from halter.grammar.gbnf_format import format_grammar
from halter.grammar.automaton import RuleAutomata, RuleTooComplex, build_automata
from halter.grammar.gbnf_parser import check_references, parse_gbnf
from halter.grammar.text_matcher import TextMatcher
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

    def __init__(self, rules: dict[str, Expr], root: str = "root", *, text_check: "TextCheck | None" = None,
                 _text: str | None = None, _automata: RuleAutomata | None = None,
                 _positions: dict[str, tuple[int, int]] | None = None) -> None:
        rs = RuleSet(dict(rules))
        #: a condition on the text beside the grammar, which no context-free rule can say (text_check.py)
        self.text_check: TextCheck | None = text_check
        #: the ``GrammarWarning``s parsing raised (GBNF only): traps llama.cpp accepts, departures
        self.warnings: list = []
        check_references(rs, root, _text)
        self.rules: dict[str, Expr] = rs.rules
        self.root = root
        if _automata is None:
            try:
                with gc_pause.paused():
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
        # (every token reference a reachable rule holds, expanded callees' included, is in the automata)
        self._has_token_refs = bool(self._automata.token_refs)

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def from_gbnf(cls, text: str, root: str = "root") -> "Grammar":
        """Parse llama.cpp GBNF; raise ``GrammarError`` (with ``.line``/``.column``) on bad input."""
        with gc_pause.paused():
            return cls._from_gbnf(text, root)

    @classmethod
    def _from_gbnf(cls, text: str, root: str) -> "Grammar":
        import warnings

        from halter.errors import GrammarWarning
        from halter.grammar import store
        cached = store.load(text, root, cls=cls)
        if cached is not None:
            grammar, found = cached
            for message, line, column, kind in found or ():
                warnings.warn(GrammarWarning(message, line, column, kind), stacklevel=3)
            return grammar
        rs = parse_gbnf(text)
        check_references(rs, root, text)
        grammar = cls(rs.rules, root, _text=text, _positions=rs.positions)
        from halter.grammar.gbnf_checks import dead_end_warnings
        found = rs.warnings + dead_end_warnings(rs.rules, root, rs.positions)
        found.sort(key=lambda w: (w[1], w[2]))
        for message, line, column, kind in found:
            warnings.warn(GrammarWarning(message, line, column, kind), stacklevel=3)
        grammar.warnings = [GrammarWarning(*w) for w in found]
        store.store(text, grammar, found)
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
        return _front_end("json_schema")(cls, schema, **options)

    @classmethod
    def from_regex(cls, pattern: str, **options: Any) -> "Grammar":
        """A grammar accepting exactly the strings that fully match ``pattern``.

        A pattern whose single automaton grows too large (nested repeats) is built again with
        a rule per repeated group (``regex_to_gbnf(split_groups=True)``).
        """
        return _front_end("regex")(cls, pattern, **options)

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
        return _front_end("pydantic")(cls, model, **options)

    @classmethod
    def from_type(cls, tp: Any, **options: Any) -> "Grammar":
        """A grammar for the JSON form of a Python type (``int``, ``list[str]``, ``Literal[...]``, ...).

        Like ``from_pydantic``: ``target="pydantic"`` and ``closed_objects=True`` by default.
        """
        return _front_end("type")(cls, tp, **options)

    @classmethod
    def _restored(cls, rules: dict[str, Expr], root: str, automata: RuleAutomata,
                  check: "TextCheck | None") -> "Grammar":
        """A grammar from rules and the automata built from them earlier (``grammar.store``)."""
        return cls(rules, root, text_check=check, _automata=automata)

    @property
    def automata(self) -> RuleAutomata:
        """The rules' automata: positions, byte classes, calls (what parser states are made of)."""
        return self._automata

    # -- matching ----------------------------------------------------------------------------
    def matcher(self) -> TextMatcher:
        """A fresh character matcher at the start of the grammar."""
        if self._has_token_refs:
            raise GrammarError("this grammar uses token references (<[id]>, <text>), which match tokens, "
                               "not text: compile it for a vocabulary (grammar.compile(vocab)) and use "
                               "the token matcher")
        return TextMatcher(self._space, check=self.text_check)

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
        from halter.grammar.compiled import CompiledGrammar, require_vocabulary
        require_vocabulary(vocab)
        if not cache:
            with self._space.lock:
                return CompiledGrammar(self, vocab, cache=False)
        per_vocab = self.__dict__.setdefault("_compiled", {})
        key = vocab.fingerprint()
        cg = per_vocab.get(key)
        if cg is None:
            with self._space.lock:               # threads compiling at once share one result
                cg = per_vocab.get(key)
                if cg is None:
                    cg = per_vocab[key] = CompiledGrammar(self, vocab, cache=True)
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


# -- front ends: the constructors a package above supplies (halter.schemas: JSON Schema, regex, types) ----

FrontEnd = Callable[..., Grammar]
_FRONT_ENDS: dict[str, FrontEnd] = {}


def register_front_end(name: str, build: FrontEnd) -> None:
    """Make ``build(cls, source, **options)`` the body of ``Grammar.from_<name>``.

    The grammar core knows no JSON Schema, regex or Python type: ``halter.schemas`` registers its
    converters here when it is imported (``import halter`` imports it)."""
    _FRONT_ENDS[name] = build


def _front_end(name: str) -> FrontEnd:
    build = _FRONT_ENDS.get(name)
    if build is None:
        raise GrammarError(f"Grammar.from_{name} needs halter.schemas, which registers it: import halter.schemas")
    return build
