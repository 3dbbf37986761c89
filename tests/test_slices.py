"""Token slices (``grammar/slices.py``, ``grammar/slice_depth.py``): first-time walks that take a character class's tokens at
once give every position the tokens it gets walking the whole trie, and escape points that differ
only below tokens the position accepts anyway; masks stay exactly what feeding token bytes gives."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from halter import Grammar, Vocabulary
from halter.grammar import slice_depth, slices, trie_kernel
from tests.conftest import shared_path
from tests.test_token_masks import random_walk_check, synthetic_vocab

pytestmark = pytest.mark.skipif(not trie_kernel.available(), reason="numba not installed: no slices")

STRING, WORD, IDENT, SPACED_WORD, SPACED_IDENT = range(5)

SCHEMA = {"type": "object", "required": ["id", "code", "notes"],
          "properties": {"id": {"type": "string", "minLength": 2, "maxLength": 5},
                         "code": {"type": "string", "pattern": "^[a-z0-9-]{3,8}$"},
                         "notes": {"type": "string", "maxLength": 60},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
                         "free": {"type": "string"}}}
DOC = {"id": "abcde", "code": "x-12345", "notes": "exactly sixty characters of notes, padded out to the limit..",
       "tags": ["ab", "xyz", ""], "free": "anything \u00e9 goes \"here\" \\ ok"}
GBNF = {
    # a rule that may end after every character: escapes everywhere, a count bound
    "words": 'root ::= w ("," w)*\nw ::= [a-zA-Z_0-9]{0,6}\n',
    # a string class that leaves out one letter: no slice may take tokens holding it
    "no-x": 'root ::= "\\"" [^"\\\\x\\x00-\\x1f]* "\\""\n',
    "bounded": 'root ::= "\\"" s "\\"" ("," "\\"" s "\\"")*\ns ::= [^"\\\\\\x00-\\x1f]{2,9}\n',
    "loop": 'root ::= "<" [^<>]* ">"\n',
}
VOCABS = ["deepseek-llm", "gpt-2", "llama-spm"]


@pytest.fixture(scope="module", params=VOCABS)
def real_vocab(request):
    return Vocabulary.from_gguf(shared_path("vocab", f"ggml-vocab-{request.param}.gguf"))


def _expected_lengths(vocab: Vocabulary, trie) -> np.ndarray:
    bad = re.compile("[\x00-\x1f\"\\\\\ud800-\udfff]")
    word = re.compile(r"[A-Za-z0-9_]+\Z")
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
    out = np.full((5, vocab.size), slices.NOT, dtype=np.int64)
    for t, b in enumerate(vocab.token_bytes):
        if trie.row_of_token[t] < 0:
            continue
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not bad.search(text):
            out[STRING, t] = len(text)
        for k, pattern in ((WORD, word), (IDENT, ident)):
            if pattern.match(text):
                out[k, t] = len(text)
            if text[:1] == " " and pattern.match(text[1:]):
                out[k + 2, t] = len(text)
            elif pattern.match(text):
                out[k + 2, t] = len(text)
    return out


def test_token_lengths_and_node_maxima_match_decoding(real_vocab):
    trie = Grammar.from_gbnf('root ::= "x"').compile(real_vocab, cache=False).trie
    sl = slices.trie_slices(trie)
    for k, want in enumerate(_expected_lengths(real_vocab, trie)):
        assert (sl.token_len[k] == want).all(), k
        rows = np.full(trie.n_rows, slices.NOT, dtype=np.int64)
        has = trie.row_of_token >= 0
        rows[trie.row_of_token[has]] = want[has]
        sample = np.arange(0, trie.n_nodes, 37)
        got = sl.node_max[k][sample]
        assert all(got[i] == rows[trie.row_lo[n]:trie.row_hi[n]].max() for i, n in enumerate(sample.tolist()))
        depth = 3
        bits = np.unpackbits(sl.covered_bits(k, depth).view(np.uint8), bitorder="little")[:real_vocab.size]
        assert (bits.astype(bool) == (want <= depth)).all()


def _depth_of(g: Grammar, vocab, position_text: bytes, k: int) -> int:
    cg = g.compile(vocab, cache=False)
    node = cg.space.step_bytes(cg.space.initial, position_text)
    return cg.kernel().depths.depth(node, k)


def test_depth_is_what_the_state_reads_whatever_it_is():
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    cap = min(slice_depth.MAX_DEPTH, slices.trie_slices(Grammar.from_gbnf('root ::= "x"').compile(vocab).trie).max_len[WORD])
    counted = Grammar.from_gbnf('root ::= [a-zA-Z0-9_]{0,4} "."')
    assert _depth_of(counted, vocab, b"", WORD) == 4
    assert _depth_of(counted, vocab, b"ab", WORD) == 2
    assert _depth_of(counted, vocab, b"abcd", WORD) == 0
    assert _depth_of(Grammar.from_gbnf('root ::= [a-zA-Z0-9_]* "."'), vocab, b"x", WORD) == cap
    assert _depth_of(Grammar.from_gbnf('root ::= [a-z]*'), vocab, b"", WORD) == 0        # "A" dies
    ident = Grammar.from_gbnf('root ::= [a-zA-Z_] [a-zA-Z0-9_]{0,2} "("')
    assert _depth_of(ident, vocab, b"", IDENT) == 3 and _depth_of(ident, vocab, b"", WORD) == 0
    spaced = Grammar.from_gbnf('root ::= " "? [a-zA-Z_] [a-zA-Z0-9_]* "("')
    assert _depth_of(spaced, vocab, b"", SPACED_IDENT) == cap and _depth_of(spaced, vocab, b"", SPACED_WORD) == 0
    # string characters: a multi-byte character dying half-way counts, as does a quote-free class
    assert _depth_of(Grammar.from_gbnf('root ::= [ -!#-\\[\\]-~]* "\\""'), vocab, b"", STRING) == 0
    assert _depth_of(Grammar.from_gbnf('root ::= [^"\\\\\\x00-\\x1f]{3} "\\""'), vocab, b"", STRING) == 3
    assert _depth_of(Grammar.from_gbnf('root ::= ([ -!#-\\[\\]-~] | [\\u0080-\\uFFFF]){0,5} "\\""'),
                     vocab, b"", STRING) == 0        # no 4-byte characters


def _check_tables(cg, positions) -> int:
    """Each position's tables with and without slices: the same tokens; escape points the same but
    for some below which every token is accepted already. Returns how many were left out."""
    kernel = cg.kernel()
    trie, space = cg.trie, cg.space
    dropped = 0
    for d in positions:
        start = space.opaque_node(d)
        kernel.use_slices = False
        acc_full, esc_full = kernel.walk_position(start)
        kernel.use_slices = True
        acc, esc = kernel.walk_position(start)
        assert (acc == acc_full).all(), d
        missing = set(esc_full.tolist()) - set(esc.tolist())
        assert set(esc.tolist()) <= set(esc_full.tolist()), d
        if missing:
            # every token strictly below a left-out node is accepted: count the rows below it
            # (a contiguous range, the node's own row first) whose tokens are not
            accepted = np.unpackbits(acc.view(np.uint8), bitorder="little").astype(bool)
            tokens, which = trie.tokens_of_rows(np.arange(trie.n_rows))
            row_bad = np.zeros(trie.n_rows, dtype=np.int64)
            np.add.at(row_bad, which, ~accepted[tokens])
            bad_before = np.concatenate(([0], np.cumsum(row_bad)))
            n = np.array(sorted(missing))
            lo = trie.row_lo[n] + (trie.node_row[n] >= 0)
            assert (bad_before[trie.row_hi[n]] == bad_before[lo]).all(), d
        dropped += len(missing)
    return dropped


def _positions(cg, n: int) -> list[int]:
    a = cg.space.a
    every = [d for d in range(a.n_positions) if a.has_bytes[d]]
    return every[::max(1, len(every) // n)]


@pytest.mark.parametrize("name", sorted(GBNF))
def test_tables_with_slices_equal_whole_walks_on_real_vocab(real_vocab, name):
    cg = Grammar.from_gbnf(GBNF[name]).compile(real_vocab, cache=False)
    dropped = _check_tables(cg, _positions(cg, 40))
    assert dropped > 0 or name != "words"
    assert random_walk_check(cg, 3, steps=12, sample=400) > 0


def test_schema_tables_with_slices_equal_whole_walks_on_real_vocab(real_vocab):
    long = {"long": {"type": "string", "maxLength": 300}, "mid": {"type": "string", "maxLength": 120}}
    schema = dict(SCHEMA, properties=dict(SCHEMA["properties"], **long))
    cg = Grammar.from_json_schema(schema).compile(real_vocab, cache=False)
    a = cg.space.a
    # a long string is read in chunks of counted characters, rules of their own; the last chunk
    # may end after any character, so its walk meets escape points below every class token
    chunks = [d for d in range(a.n_positions) if a.has_bytes[d] and "-counted-" in a.rule_names[a.rule_of[d]]]
    tail = [d for d in chunks if "-counted-t" in a.rule_names[a.rule_of[d]]]
    assert tail
    assert _check_tables(cg, tail[::3] + chunks[::max(1, len(chunks) // 20)] + _positions(cg, 20)) > 0


def test_shared_c_grammar_tables_with_slices(real_vocab):
    g = Grammar.from_gbnf(shared_path("grammars", "c.gbnf").read_text())
    cg = g.compile(real_vocab, cache=False)
    _check_tables(cg, _positions(cg, 40))


def _follow(cg, ref, data: bytes) -> int:
    """Feed ``data`` through ``cg``'s matcher (longest allowed token that spells what comes next),
    comparing every mask with ``ref``'s (slices off); returns the masks compared."""
    tb = cg.vocab.token_bytes
    m, n, pos, steps = cg.matcher(), ref.matcher(), 0, 0
    while pos < len(data):
        mask = m.allowed_mask()
        assert (mask == n.allowed_mask()).all(), data[:pos]
        steps += 1
        best = max((t for t in np.flatnonzero(mask) if data.startswith(tb[t], pos)), key=lambda t: len(tb[t]))
        assert m.accept_token(int(best)) and n.accept_token(int(best))
        pos += len(tb[best])
    assert (m.allowed_mask() == n.allowed_mask()).all() and m.is_accepting()
    return steps + 1


def _pair(g: Grammar, vocab):
    cg, ref = g.compile(vocab, cache=False), g.compile(vocab, cache=False)
    ref.kernel().use_slices = False
    return cg, ref


def test_masks_at_length_bounds_equal_whole_walks(real_vocab):
    """Strings filled to ``maxLength`` (no token longer than what is left may come), a pattern's
    class, escapes: every mask along the document as without slices."""
    cg, ref = _pair(Grammar.from_json_schema(SCHEMA), real_vocab)
    assert _follow(cg, ref, json.dumps(DOC, ensure_ascii=False).encode()) > 10
    assert random_walk_check(cg, 5, steps=15, sample=400) > 0


def test_a_depth_one_too_deep_lets_a_wrong_token_in(monkeypatch):
    """The checks above see a slice that takes one character too many: at ``maxLength``'s
    boundary, tokens one character too long would come in."""
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    true_depth = slice_depth.SliceDepth.depth
    monkeypatch.setattr(slice_depth.SliceDepth, "depth", lambda self, start, k: true_depth(self, start, k) + 1)
    cg, ref = _pair(Grammar.from_json_schema(SCHEMA), vocab)
    with pytest.raises(AssertionError):
        _follow(cg, ref, json.dumps(DOC, ensure_ascii=False).encode())


def test_synthetic_vocab_masks_match_brute_force_with_slices():
    vocab = synthetic_vocab()
    for text in GBNF.values():
        cg = Grammar.from_gbnf(text).compile(vocab, cache=False)
        for seed in range(3):
            assert random_walk_check(cg, seed, steps=25, sample=None) > 0


@pytest.mark.slow
def test_depths_over_positions_equal_depths_over_parser_states():
    """Where a position's calls read none of a slice, its depth is searched over positions
    (``position_depth.py``): the same depth as over parser states, on every position of a schema
    with key complements and counted strings and of code grammars, for every slice."""
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    schema = dict(SCHEMA, additionalProperties=True,
                  properties=dict(SCHEMA["properties"], long={"type": "string", "minLength": 3, "maxLength": 300},
                                  **{k: {"type": "integer"} for k in ("ids", "idx", "codes", "free2")}))
    grammars = [Grammar.from_json_schema(schema)] + [Grammar.from_gbnf(t) for t in GBNF.values()]
    c_gbnf = shared_path("grammars", "c.gbnf")
    grammars.append(Grammar.from_gbnf(c_gbnf.read_text()))
    by_positions = 0
    for g in grammars:
        cg = g.compile(vocab, cache=False)
        space, sl = cg.space, slices.trie_slices(cg.trie)
        fast, slow = slice_depth.SliceDepth(space, sl), slice_depth.SliceDepth(space, sl)
        slow.by_positions = False
        for d in range(space.a.n_positions):
            if not space.a.has_bytes[d]:
                continue
            start = space.opaque_node(d)
            for k in range(len(slices.SLICES)):
                if sl.max_len[k]:
                    assert fast.depth(start, k) == slow.depth(start, k), (d, k)
        by_positions += sum(v is not None for v in fast._positions._depth.values())
    assert by_positions > 200
