"""The grammar sampler and CommonSampler: both grammar modes stay inside the grammar and draw
from the distributions llama.cpp's common_sampler gives."""
import numpy as np
import pytest

from halter.errors import NoValidTokenError
from halter.grammar.bitmask import bool_to_bitmask
from halter.sampling import (Candidates, CommonSampler, Dist, GrammarSampler, SamplerChain, SamplingParams,
                             Temperature, TopK)
from tests.sampling_stats import chi2_pvalue, softmax


class FakeMatcher:
    """A token matcher over a tiny vocabulary: step i allows the tokens in ``steps[i]``."""

    def __init__(self, vocab_size, steps):
        self.vocab_size = vocab_size
        self.steps = [frozenset(s) for s in steps]
        self.pos = 0

    def _allowed(self):
        return self.steps[self.pos] if self.pos < len(self.steps) else frozenset()

    def allowed_mask(self):
        m = np.zeros(self.vocab_size, dtype=bool)
        m[list(self._allowed())] = True
        return m

    def fill_bitmask(self, out, index=0):
        row = out if out.ndim == 1 else out[index]
        row[:] = bool_to_bitmask(self.allowed_mask())

    def is_allowed(self, token):
        return token in self._allowed()

    def accept_token(self, token):
        if token not in self._allowed():
            return False
        self.pos += 1
        return True

    def reset(self):
        self.pos = 0

    def is_accepting(self):
        return self.pos == len(self.steps)


VALID = {1, 3, 4, 6}
LOGITS = np.array([2.0, 0.5, 1.8, 1.2, -0.3, 1.5, 0.1, 0.9], dtype=np.float32)


def test_grammar_sampler_masks_full_row_and_subsets():
    g = GrammarSampler(FakeMatcher(8, [VALID]))
    c = Candidates.from_logits(LOGITS)
    g.apply(c)
    assert set(np.flatnonzero(np.isfinite(c.logits)).tolist()) == VALID
    c = Candidates(ids=[6, 0, 3], logits=[1.0, 2.0, 3.0])
    g.apply(c)
    assert np.isfinite(c.logits).tolist() == [True, False, True]
    c = Candidates(ids=[0], logits=[1.0])
    g.apply(c)
    assert np.isneginf(c.logits[0])


def test_grammar_sampler_padded_model_vocab_is_disallowed():
    g = GrammarSampler(FakeMatcher(6, [{0, 5}]))
    c = Candidates.from_logits(np.zeros(10, dtype=np.float32))
    g.apply(c)
    assert np.flatnonzero(np.isfinite(c.logits)).tolist() == [0, 5]


def test_grammar_sampler_accept_advances_and_rejects():
    m = FakeMatcher(8, [{1}, {2}])
    g = GrammarSampler(m)
    g.accept(1)
    assert m.pos == 1
    with pytest.raises(NoValidTokenError, match="token 5 is not allowed"):
        g.accept(5)
    twin = g.clone()
    g.reset()
    assert m.pos == 0 and twin.matcher.pos == 1


def chain_for(seed):
    return SamplerChain([TopK(3), Temperature(1.0), Dist(seed)])


def grammar_first_probs():
    masked = LOGITS.copy()
    masked[[i for i in range(8) if i not in VALID]] = -np.inf
    top = np.argsort(-masked, kind="stable")[:3]
    p = np.zeros(8)
    p[top] = softmax(masked[top])
    return p


def test_grammar_first_draws_from_the_chain_restricted_to_valid_tokens():
    cs = CommonSampler(chain_for(11), FakeMatcher(8, [VALID]))
    counts = np.zeros(8)
    for _ in range(12000):
        counts[cs.sample(LOGITS, grammar_first=True)] += 1
    assert set(np.flatnonzero(counts).tolist()) <= VALID
    assert chi2_pvalue(counts, grammar_first_probs()) > 1e-4


def test_resample_on_reject_mixes_the_chain_and_grammar_first():
    # P(t) = P_chain(t) [t valid] + P_chain(invalid) * P_grammar_first(t)
    top = np.argsort(-LOGITS, kind="stable")[:3]  # ids 0, 2, 5: none valid except via resampling
    p_chain = np.zeros(8)
    p_chain[top] = softmax(LOGITS[top])
    valid = np.isin(np.arange(8), list(VALID))
    expected = p_chain * valid + p_chain[~valid].sum() * grammar_first_probs()
    cs = CommonSampler(chain_for(12), FakeMatcher(8, [VALID]))
    counts = np.zeros(8)
    for _ in range(12000):
        counts[cs.sample(LOGITS)] += 1
    assert chi2_pvalue(counts, expected) > 1e-4
    assert cs.n_resampled == 12000  # the chain's top 3 are all invalid here


def test_resample_on_reject_keeps_valid_first_draws():
    valid = {0, 5, 6}
    top = np.argsort(-LOGITS, kind="stable")[:3]  # 0, 2, 5
    p_chain = np.zeros(8)
    p_chain[top] = softmax(LOGITS[top])
    masked = np.where(np.isin(np.arange(8), list(valid)), LOGITS, -np.inf)
    gf = np.zeros(8)
    gtop = np.argsort(-masked, kind="stable")[:3]
    gf[gtop] = softmax(masked[gtop])
    vmask = np.isin(np.arange(8), list(valid))
    expected = p_chain * vmask + p_chain[~vmask].sum() * gf
    cs = CommonSampler(chain_for(13), FakeMatcher(8, [valid]))
    counts = np.zeros(8)
    for _ in range(12000):
        counts[cs.sample(LOGITS)] += 1
    assert chi2_pvalue(counts, expected) > 1e-4


@pytest.mark.parametrize("grammar_first", [False, True])
def test_both_modes_always_return_grammar_valid_tokens(grammar_first):
    rng = np.random.default_rng(4)
    steps = [set(rng.choice(50, size=int(rng.integers(1, 6)), replace=False).tolist()) for _ in range(60)]
    params = SamplingParams(seed=9, top_k=10, repeat_penalty=1.5, min_p=0.1)
    cs = CommonSampler(params, FakeMatcher(50, steps))
    for step in steps:
        tok = cs.sample(rng.standard_normal(50).astype(np.float32) * 4, grammar_first=grammar_first)
        assert tok in step
        cs.accept(tok)
    assert cs.grammar.matcher.is_accepting()


def test_no_valid_token_raises_instead_of_sampling_outside_the_mask():
    cs = CommonSampler(SamplingParams(seed=1), FakeMatcher(8, [set()]))
    for gf in (False, True):
        with pytest.raises(NoValidTokenError, match="allows no token"):
            cs.sample(LOGITS, grammar_first=gf)
    banned = SamplingParams(seed=1, logit_bias={3: float("-inf")})
    cs = CommonSampler(banned, FakeMatcher(8, [{3}]))
    with pytest.raises(NoValidTokenError, match="finite logit"):
        cs.sample(LOGITS)


def test_prompt_tokens_reach_the_chain_but_not_the_grammar():
    m = FakeMatcher(8, [{1}])
    cs = CommonSampler(SamplingParams(seed=1, repeat_penalty=2.0), m)
    cs.accept_prompt([0, 2, 0])
    assert m.pos == 0 and cs.chain[0].history == [0, 2, 0]
    cs.accept(1)
    assert m.pos == 1 and cs.last() == 1
    clone = cs.clone()
    cs.reset()
    assert m.pos == 0 and cs.chain[0].history == [] and clone.grammar.matcher.pos == 1


def test_common_sampler_without_grammar_and_argument_errors():
    cs = CommonSampler(SamplingParams(seed=3, temperature=0.0), n_vocab=8)
    assert cs.sample(LOGITS) == 0
    with pytest.raises(ValueError, match="n_vocab"):
        CommonSampler(SamplingParams())
    with pytest.raises(ValueError, match="1-D"):
        cs.sample(np.zeros((2, 8)))
    with pytest.raises(TypeError, match="token matcher"):
        CommonSampler(SamplingParams(), grammar=object(), n_vocab=8)


def _real_compiled_grammar():
    from halter.grammar.grammar import Grammar
    from halter.vocab.vocabulary import Vocabulary
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", b"c", b""], eog_ids=[4])
    return Grammar.from_gbnf('root ::= "a" "b"+ "c"').compile(vocab)


@pytest.mark.parametrize("grammar_first", [False, True])
def test_with_the_real_grammar(grammar_first):
    cg = _real_compiled_grammar()
    cs = CommonSampler(SamplingParams(seed=2, top_k=0, top_p=1.0, min_p=0.0), cg, n_vocab=5)
    rng = np.random.default_rng(0)
    text = b""
    pieces = [b"a", b"b", b"ab", b"c", b""]
    for _ in range(20):
        tok = cs.sample(rng.standard_normal(5).astype(np.float32), grammar_first=grammar_first)
        cs.accept(tok)
        if tok == 4:
            break
        text += pieces[tok]
    assert tok == 4  # the grammar ends with "c", then only end-of-generation is allowed
    assert text[:1] == b"a" and text[-1:] == b"c" and set(text[1:-1]) == {ord("b")}


@pytest.mark.parametrize("grammar_first", [False, True])
def test_precomputed_bitmask_draws_exactly_as_the_matcher_would(grammar_first):
    # The engine hands sample() the mask it computed during the forward pass; the draws must be
    # the ones the sampler makes when it asks the matcher itself (same seed, same stream).
    rng = np.random.default_rng(5)
    steps = [set(rng.choice(40, size=int(rng.integers(1, 8)), replace=False).tolist()) for _ in range(300)]
    rows = rng.standard_normal((300, 44)).astype(np.float32) * 3     # 4 padded ids past the grammar
    params = SamplingParams(seed=21, top_k=12, min_p=0.02)
    asked, given = CommonSampler(params, FakeMatcher(40, steps), n_vocab=44), \
        CommonSampler(params, FakeMatcher(40, steps), n_vocab=44)
    for step, row in zip(steps, rows):
        bitmask = bool_to_bitmask(given.grammar.matcher.allowed_mask())
        a = asked.sample(row, grammar_first=grammar_first)
        b = given.sample(row, grammar_first=grammar_first, bitmask=bitmask)
        assert a == b and b in step
        asked.accept(a)
        given.accept(b)
    assert asked.n_resampled == given.n_resampled


def test_precomputed_empty_bitmask_is_a_dead_end():
    cs = CommonSampler(SamplingParams(seed=1), FakeMatcher(8, [VALID]))
    with pytest.raises(NoValidTokenError, match="allows no token"):
        cs.sample(LOGITS, grammar_first=True, bitmask=np.zeros(1, dtype=np.int32))


def test_a_plain_sample_accept_object_works_as_the_chain():
    class Argmax:
        def __init__(self):
            self.seen = []

        def sample(self, logits):
            self.seen.append(np.array(logits))
            return int(np.argmax(logits))

        def accept(self, token):
            pass

    cs = CommonSampler(Argmax(), FakeMatcher(8, [VALID]))
    assert cs.sample(LOGITS) == 3                       # argmax 0 rejected, resampled in the grammar
    assert cs.n_resampled == 1 and np.isneginf(cs.chain.seen[1][0])
    assert cs.sample(LOGITS, grammar_first=True) == 3 and len(cs.chain.seen) == 3
