"""Token masks: ``allowed_mask`` agrees with feeding each token's bytes to the character matcher.

States are reached by random walks that pick allowed tokens (and so also check that every allowed
token really can be accepted), on a synthetic vocabulary (checked in full) and on real vocabularies
from ../shared/vocab (checked on a sample of tokens per state).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from halter import Grammar, Vocabulary
from halter.errors import GrammarError
from halter.grammar.compiled import CompiledGrammar
from tests.conftest import shared_path

JSON_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [0-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
'''

GRAMMARS = {
    "json": JSON_GBNF,
    "left-recursive": 'root ::= expr "."\nexpr ::= expr ("+" | "*") term | term\nterm ::= [0-9]+ | "(" expr ")"',
    "unicode": 'root ::= ("é" | [漢字] | "😀" | [a-c])+ "!"',
    "ambiguous": 'root ::= ("ab" | "a" | "b" | "abc")* "z"',
    "nested-optional": 'root ::= "<" name ("=" value)? ">"\nname ::= [a-z]{1,4}\nvalue ::= "\\"" [^"]* "\\""',
}


def synthetic_vocab() -> Vocabulary:
    pieces = [bytes([b]) for b in range(256)]
    pieces += [b"ab", b"abc", b"a+", b"+1", b"12", b"123", b"(1", b"1)", b"1).", b"{\"", b"\":", b"\": ",
               b"\",", b"\"}", b"}", b" \"", b"true", b"null", b", \"", b"[1", b"1,", b"]}", b"\\u00",
               "é".encode(), "漢".encode(), "😀".encode(), "é!".encode(), "😀".encode()[:2],
               "😀".encode()[2:], "漢".encode()[:1], "漢".encode()[1:] + b"!", b"<a", b"=\"", b"\">",
               b"zz", b"bz", b"abz", b"x\"", b"\"x"]
    pieces += [b"<s>", b"</s>", b""]
    n = len(pieces)
    return Vocabulary.from_token_bytes(pieces, eog_ids=[n - 2], special_ids=[n - 3, n - 1])


def brute_force(cg: CompiledGrammar, matcher, ids) -> np.ndarray:
    """Allowed-ness of ``ids`` by copying the matcher and feeding each token alone."""
    out = np.zeros(len(ids), dtype=bool)
    for j, t in enumerate(ids):
        m = matcher.copy()
        out[j] = m.accept_token(int(t))
    return out


def random_walk_check(cg: CompiledGrammar, seed: int, steps: int, sample: int | None):
    rng = random.Random(seed)
    m = cg.matcher()
    n_checked = 0
    for _ in range(steps):
        mask = m.allowed_mask()
        if sample is None:
            ids = np.arange(cg.vocab_size)
        else:
            allowed = np.flatnonzero(mask)
            ids = np.unique(np.concatenate([
                np.array(rng.sample(range(cg.vocab_size), sample)),
                np.array(rng.sample(list(allowed), min(len(allowed), sample // 4)), dtype=np.int64)]))
        expected = brute_force(cg, m, ids)
        assert (mask[ids] == expected).all(), f"mismatch at tokens {ids[mask[ids] != expected][:10]}"
        n_checked += 1
        allowed = np.flatnonzero(mask)
        if not len(allowed):
            break
        text_ids = [t for t in allowed if not cg.eog_mask[t]]
        if not text_ids:
            assert m.is_accepting()
            break
        # prefer longer tokens sometimes, and end-of-generation rarely, to reach deep states
        t = rng.choice(text_ids)
        assert m.is_allowed(int(t))
        assert m.accept_token(int(t))
    return n_checked


@pytest.fixture(scope="module")
def synth():
    return synthetic_vocab()


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_masks_match_brute_force_on_synthetic_vocab(synth, name):
    cg = Grammar.from_gbnf(GRAMMARS[name]).compile(synth, cache=False)
    for seed in range(6):
        assert random_walk_check(cg, seed, steps=40, sample=None) > 0


def test_eog_allowed_exactly_when_grammar_may_end(synth):
    cg = Grammar.from_gbnf('root ::= "ab" "c"?').compile(synth, cache=False)
    eog = len(synth) - 2
    m = cg.matcher()
    assert not m.allowed_mask()[eog] and not m.is_allowed(eog)
    assert m.accept_token(synth.token_bytes.index(b"ab"))
    assert m.allowed_mask()[eog] and m.is_accepting() and not m.is_finished()
    assert m.accept_token(eog)
    assert m.is_finished() and not m.accept_token(ord("c"))
    m.rollback(1)
    assert m.accept_token(ord("c")) and m.is_finished()


def test_a_literal_holding_a_lone_surrogate_is_a_dead_branch(synth):
    # no valid UTF-8 spells U+DC80 (the matcher refuses its CESU bytes), so "a" would be a dead
    # end: the branch is dropped, as a class's surrogates are; raw surrogates in the text, too
    for text in ['root ::= "a" "\\uDC80" | "b"', 'root ::= "a\udc80" | "b"', 'root ::= "a" [\\uDC80] | "b"']:
        m = Grammar.from_gbnf(text).compile(synth, cache=False).matcher()
        assert not m.is_allowed(ord("a")) and m.is_allowed(ord("b")), text
    with pytest.raises(GrammarError, match="never match"):
        Grammar.from_gbnf('root ::= "\\uD83D\\uDE00"')


def test_special_tokens_never_come_from_text(synth):
    cg = Grammar.from_gbnf("root ::= .*").compile(synth, cache=False)
    mask = cg.matcher().allowed_mask()
    assert not mask[len(synth) - 3] and not mask[len(synth) - 1]   # control and empty tokens


def test_partial_utf8_tokens(synth):
    cg = Grammar.from_gbnf('root ::= "😀" "漢!"').compile(synth, cache=False)
    m = cg.matcher()
    half = synth.token_bytes.index("😀".encode()[:2])
    assert m.allowed_mask()[half]
    assert m.accept_token(half)
    assert m.accept_token(synth.token_bytes.index("😀".encode()[2:]))
    lead = synth.token_bytes.index("漢".encode()[:1])
    assert m.allowed_mask()[lead] and m.accept_token(lead)
    rest = synth.token_bytes.index("漢".encode()[1:] + b"!")
    assert m.allowed_mask().sum() >= 1 and m.allowed_mask()[rest]
    assert m.accept_token(rest) and m.is_accepting()


def test_token_references(synth):
    bos = len(synth) - 3     # "<s>" is a control token
    g = Grammar.from_gbnf('root ::= <[%d]> "a" !<[%d]> "b"' % (bos, ord("x")))
    cg = g.compile(synth, cache=False)
    m = cg.matcher()
    mask = m.allowed_mask()
    assert mask[bos] and mask.sum() == 1
    assert m.accept_token(bos) and m.accept_token(ord("a"))
    mask = m.allowed_mask()
    assert not mask[ord("x")] and mask[ord("y")] and mask[synth.token_bytes.index(b"null")]
    assert not mask[len(synth) - 2]                       # end-of-generation is not "any token"
    assert m.accept_token(ord("y")) and m.accept_token(ord("b")) and m.is_accepting()
    by_text = Grammar.from_gbnf('root ::= <s> "a"').compile(synth, cache=False).matcher()
    assert by_text.accept_token(bos)
    with pytest.raises(Exception, match="not a single token"):
        Grammar.from_gbnf('root ::= <think>').compile(synth, cache=False)


def test_bitmask_layout_and_rollback(synth):
    cg = Grammar.from_gbnf(GRAMMARS["json"]).compile(synth, cache=False)
    m = cg.matcher()
    words = np.zeros((2, (len(synth) + 31) // 32), dtype=np.int32)
    m.fill_bitmask(words, index=1)
    mask = m.allowed_mask()
    bits = np.array([(int(words[1, t // 32]) >> (t % 32)) & 1 for t in range(len(synth))], dtype=bool)
    assert (bits == mask).all() and not words[0].any()
    assert m.accept_token(synth.token_bytes.index(b"{\""))
    assert m.accept_token(ord("k"))
    inside = m.allowed_mask()
    assert m.accept_token(synth.token_bytes.index(b"\": "))
    m.rollback(1)
    assert (m.allowed_mask() == inside).all()
    assert not m.accept_token(1)          # a raw control character: rejected, nothing changes
    assert (m.allowed_mask() == inside).all()


def test_fill_bitmask_into_the_same_buffer_follows_the_matcher(synth):
    """The checked target of ``fill_bitmask`` is remembered, so every later fill must still write
    this step's mask into the right row, and clear words past the vocabulary in a wider buffer."""
    cg = Grammar.from_gbnf(GRAMMARS["json"]).compile(synth, cache=False)
    m = cg.matcher()
    n_words = (len(synth) + 31) // 32
    wide = np.full((3, n_words + 2), -1, dtype=np.int32)

    def row_mask(r: int) -> np.ndarray:
        return np.array([(int(wide[r, t // 32]) >> (t % 32)) & 1 for t in range(len(synth))], dtype=bool)

    for token in (synth.token_bytes.index(b"{\""), ord("k"), synth.token_bytes.index(b"\": ")):
        m.fill_bitmask(wide, 2)
        assert (row_mask(2) == m.allowed_mask()).all() and not wide[2, n_words:].any()
        m.fill_bitmask(wide, 0)
        assert (row_mask(0) == m.allowed_mask()).all()
        assert m.accept_token(token)
    m.fill_bitmask(wide, 0)
    assert (row_mask(0) == m.allowed_mask()).all() and (row_mask(0) != row_mask(2)).any()
    assert (wide[1] == -1).all()                   # a row never named is left alone
    flat = np.zeros(n_words, dtype=np.uint32)
    m.fill_bitmask(flat)
    assert (flat.view(np.int32) == wide[0, :n_words]).all()


def test_forced_bytes(synth):
    cg = Grammar.from_gbnf('root ::= "{\\"name\\": \\"" [a-z]+ "\\"}"').compile(synth, cache=False)
    m = cg.matcher()
    assert m.forced_bytes() == b'{"name": "'
    assert m.accept_bytes(m.forced_bytes())
    assert m.forced_bytes() == b""
    assert m.accept_token(ord("x"))
    assert m.forced_bytes() == b""          # another letter or the closing quote


def test_tables_are_built_on_need_and_saved_and_loaded(synth, tmp_path):
    """Compiling walks nothing; a matcher's masks build the tables of the positions it visits;
    ``save`` writes those, ``load`` reads them back, and masks from loaded tables are the same."""
    g = Grammar.from_gbnf(GRAMMARS["json"])
    cold = g.compile(synth, cache=False)
    assert cold.n_built == 0
    assert random_walk_check(cold, 3, steps=25, sample=None) > 0
    some = cold.n_built
    assert 0 < some < sum(cold.space.a.has_bytes)     # only what the walk visited
    path = tmp_path / "tables.npz"
    cold.save(path)
    loaded = CompiledGrammar.load(path, Grammar.from_gbnf(GRAMMARS["json"]), synth)
    assert loaded.from_cache and loaded.n_built == some
    assert random_walk_check(loaded, 3, steps=25, sample=None) > 0
    assert (loaded.acc_bits == cold.acc_bits).all()                # the rest built alike on need
    assert (loaded.esc_nodes == cold.esc_nodes).all()
    other = Grammar.from_gbnf('root ::= "a"')
    with pytest.raises(Exception, match="does not hold tables"):
        CompiledGrammar.load(path, other, synth)


def test_compiled_grammar_is_reused_in_process(synth):
    """Compiling the same grammar again (a second generation) keeps the masks computed so far."""
    g = Grammar.from_gbnf(GRAMMARS["nested-optional"])
    first = g.compile(synth)
    m = first.matcher()
    m.allowed_mask()
    assert first._mask_memo
    again = g.compile(synth)
    assert again is first and again._mask_memo
    fresh = g.compile(synth, cache=False)
    assert fresh is not first and not fresh._mask_memo
    assert (fresh.matcher().allowed_mask() == m.allowed_mask()).all()



def test_states_with_equal_masks_share_one_read_only_array(synth):
    """Masks are kept once per distinct content (a generation copies out fewer distinct arrays), and
    no caller can change a kept mask in place: each state's fill still gives its own mask."""
    g = Grammar.from_gbnf('root ::= "x" ("ab" | "cd") "y" ("ab" | "cd") "]"')
    cg = g.compile(synth, cache=False)
    steps = (b"x", b"ab", b"y", b"ab")
    m, expected = cg.matcher(), []
    for step in steps:
        expected.append(m.allowed_mask().copy())
        assert m.accept_bytes(step)
    masks = list(cg._mask_memo.values())
    assert len(masks) == 4                           # one per state met: "", "x", "xab", "xaby"
    by_content = {}
    for bits in masks:
        assert by_content.setdefault(bits.tobytes(), bits) is bits    # equal content: the same array
        assert not bits.flags.writeable
        with pytest.raises(ValueError):
            bits[0] = 0
    assert len(by_content) == 3                      # after "x" and after "xaby" the same tokens go on
    again = cg.matcher()
    for step, mask in zip(steps, expected):
        assert (again.allowed_mask() == mask).all()
        assert again.accept_bytes(step)

# -- real vocabularies ----------------------------------------------------------------------------

REAL = ["llama-spm", "gpt-2", "deepseek-llm"]


@pytest.fixture(scope="module", params=REAL)
def real_vocab(request):
    return Vocabulary.from_gguf(shared_path("vocab", f"ggml-vocab-{request.param}.gguf"))


@pytest.mark.parametrize("name", ["json", "unicode", "left-recursive"])
def test_masks_match_brute_force_on_real_vocab(real_vocab, name):
    cg = Grammar.from_gbnf(GRAMMARS[name]).compile(real_vocab)
    for seed in range(2):
        assert random_walk_check(cg, seed, steps=12, sample=400) > 0


def test_json_document_token_by_token_on_real_vocab(real_vocab):
    """Feed a realistic document with a greedy longest-match tokenization; every token is allowed."""
    cg = Grammar.from_gbnf(GRAMMARS["json"]).compile(real_vocab)
    index: dict[bytes, int] = {}
    for i, b in enumerate(real_vocab.token_bytes):
        if b and cg.text_token[i]:
            index.setdefault(b, i)
    doc = '{"name": "Jos\\u00e9 Ñandú 漢字", "age": 42, "tags": ["a", "b"], "n": {"x": -1.5e3, "ok": [true, null]}}'
    data, pos, m = doc.encode(), 0, cg.matcher()
    while pos < len(data):
        for n in range(min(24, len(data) - pos), 0, -1):
            tid = index.get(data[pos:pos + n])
            if tid is not None:
                break
        assert m.allowed_mask()[tid], data[pos:pos + n]
        assert m.accept_token(tid)
        pos += n
    assert m.is_accepting()
    assert m.allowed_mask()[sorted(real_vocab.eog_ids)[0]]


SCHEMA = {"type": "object", "required": ["name"],
          "properties": {"name": {"type": "string", "maxLength": 80},
                         "tags": {"type": "array", "items": {"enum": ["alpha", "beta"]}},
                         "n": {"type": "integer", "minimum": 0}}}
SCHEMA_DOC = {"name": 'Jo said "hi", ça va', "tags": ["alpha", "beta"], "n": 42, "nam": {"k": [1, None]}}


def test_schema_grammar_masks_match_brute_force_on_real_vocab(real_vocab):
    """Schema grammars lean on escapes (keys outside ``properties``, counted strings, bounded
    whitespace): along a document written with the longest allowed tokens, and along random walks,
    masks agree with feeding tokens one by one; tokens that start with a quote, comma, space or
    backslash (those that end a rule mid-token) are always among the checked ones."""
    import json
    cg = Grammar.from_json_schema(SCHEMA).compile(real_vocab)
    tb = real_vocab.token_bytes
    risky = np.array([i for i, b in enumerate(tb) if b[:1] in (b'"', b",", b" ", b"\\", b":")], dtype=np.int64)
    rng = np.random.default_rng(0)
    data, pos, m = json.dumps(SCHEMA_DOC, ensure_ascii=False).encode(), 0, cg.matcher()
    while pos < len(data):
        mask = m.allowed_mask()
        ids = np.unique(np.concatenate([rng.choice(risky, min(300, len(risky)), replace=False),
                                        rng.integers(0, real_vocab.size, 300)]))
        assert (mask[ids] == brute_force(cg, m, ids)).all(), data[:pos]
        best = max((t for t in np.flatnonzero(mask) if data.startswith(tb[t], pos)), key=lambda t: len(tb[t]))
        assert m.accept_token(int(best))
        pos += len(tb[best])
    assert m.is_accepting()
    for seed in range(2):
        assert random_walk_check(cg, seed, steps=12, sample=400) > 0


def test_byte_tokens_and_token_refs_on_real_vocab():
    """Llama-2's <0xXX> byte tokens spell a character one byte at a time; <s> is a control token."""
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-llama-spm.gguf"))
    cg = Grammar.from_gbnf('root ::= <s> "漢" [字-龥]').compile(vocab)
    m = cg.matcher()
    bos = vocab.find_token("<s>")
    assert m.allowed_mask()[bos] and m.allowed_mask().sum() == 1
    assert m.accept_token(bos)
    byte_ids = [vocab.find_token(f"<0x{b:02X}>") for b in "漢".encode()]
    assert m.allowed_mask()[byte_ids[0]] and not m.allowed_mask()[byte_ids[1]]
    for i, t in enumerate(byte_ids):
        expected = brute_force(cg, m, np.arange(vocab.size))
        assert (m.allowed_mask() == expected).all(), f"after {i} bytes"
        assert m.accept_token(t)
    whole = vocab.find_token("字")
    assert whole is not None and m.allowed_mask()[whole]
    assert not m.allowed_mask()[vocab.find_token("<0x41>")]


def test_misuse_gets_clear_errors(synth):
    g = Grammar.from_gbnf('root ::= "a"')
    with pytest.raises(TypeError, match="Vocabulary"):
        g.compile([b"a", b"b"])
    m = g.compile(synth, cache=False).matcher()
    with pytest.raises(TypeError, match="int32"):
        m.fill_bitmask(np.zeros(10, dtype=np.int64))
    with pytest.raises(ValueError, match="words"):
        m.fill_bitmask(np.zeros(1, dtype=np.int32))
    with pytest.raises(TypeError):
        m.accept_token("a")
    assert not m.accept_token(len(synth) + 5) and not m.is_allowed(-1)
    with pytest.raises(ValueError, match="roll back"):
        m.rollback(1)


def test_wide_class_kept_as_a_rule_masks_match_brute_force_on_real_vocab(real_vocab):
    """Past the inlining budget a wide class (``\\p{L}``) is a rule called at every letter, so a
    token of several letters leaves and re-enters it at each one: masks still agree."""
    import json
    from halter.grammar.nfa import NfaBuilder
    from halter.schemas import schema_to_rules
    schema = {"type": "string", "pattern": "\\p{L}{10}", "maxLength": 40}
    builder = NfaBuilder(dict(schema_to_rules(schema)))
    builder.plan_inlining("root")
    assert "str-chars-2" in builder.rules and "str-chars-2" not in builder.inline    # the case meant
    cg = Grammar.from_json_schema(schema).compile(real_vocab)
    tb = real_vocab.token_bytes
    rng = np.random.default_rng(1)
    wordy = np.array([i for i, b in enumerate(tb) if len(b) > 2 and b[:1].isalpha()], dtype=np.int64)
    for text, ok in [("12 Größenwahnsinn 3", True), ("ab cd ef gh", False)]:
        data, pos, m = json.dumps(text, ensure_ascii=False).encode(), 0, cg.matcher()
        while pos < len(data):
            mask = m.allowed_mask()
            ids = np.unique(np.concatenate([rng.choice(wordy, 300, replace=False),
                                            rng.integers(0, real_vocab.size, 200)]))
            assert (mask[ids] == brute_force(cg, m, ids)).all(), data[:pos]
            fits = [t for t in np.flatnonzero(mask) if data.startswith(tb[t], pos)]
            if not fits:
                break
            best = max(fits, key=lambda t: len(tb[t]))
            assert m.accept_token(int(best))
            pos += len(tb[best])
        assert (pos == len(data) and m.is_accepting()) == ok, text


def test_children_with_bytes_by_search_and_by_filter_agree():
    """``TokenTrie.children_with_bytes`` binary-searches each (node, byte) pair or filters all the
    children, whichever is cheaper: both give the same sorted children."""
    from halter.grammar.trie import TokenTrie
    vocab = synthetic_vocab()
    trie = TokenTrie(vocab.token_bytes, np.ones(vocab.size, dtype=bool))
    rng = np.random.default_rng(3)
    for _ in range(40):
        nodes = np.unique(rng.integers(0, trie.n_nodes, size=int(rng.integers(1, 200))))
        wanted = np.unique(rng.integers(0, 256, size=int(rng.integers(1, 120))))
        expected = sorted(k for k in range(trie.n_nodes)
                          if trie.parent[k] in set(nodes.tolist()) and trie.byte[k] in set(wanted.tolist()))
        assert trie.children_with_bytes(nodes, wanted).tolist() == expected
