"""The torch device sampler on CPU tensors: shapes, greedy, the grammar bitmask, agreement with the
numpy chain, and the distribution it draws from."""
import numpy as np
import pytest
import torch

from halter.grammar.bitmask import bool_to_bitmask
from halter.sampling import SamplingParams
from halter.sampling.device import DeviceSampler
from tests.sampling_stats import chi2_pvalue, softmax


def test_batched_tokens_stay_tensors_on_the_device():
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    out = DeviceSampler(seed=1).sample(logits, return_candidates=True)
    assert out.tokens.shape == (4,) and out.tokens.dtype == torch.long and out.ids.shape == (4, 40)
    assert torch.equal(logits, before)
    assert torch.allclose(out.probs.sum(-1), torch.ones(4))


def test_greedy_is_argmax():
    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(1))
    assert torch.equal(DeviceSampler(temperature=0.0).sample(logits), logits.argmax(-1))


def test_bitmask_is_applied_on_the_device_per_row():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 64, generator=gen)
    masks = np.zeros((2, 64), dtype=bool)
    masks[0, [3, 9]] = True
    masks[1, [60]] = True
    ds = DeviceSampler(seed=4, top_k=10)
    for _ in range(30):
        toks = ds.sample(logits, torch.from_numpy(bool_to_bitmask(masks)))
        assert toks[0].item() in (3, 9) and toks[1].item() == 60


def test_llama_stream_agrees_with_the_numpy_chain():
    rng = np.random.default_rng(3)
    params = SamplingParams(seed=99)
    chain = params.build(500)
    ds = DeviceSampler.from_params(params)
    agree = 0
    for _ in range(40):
        row = rng.standard_normal(500).astype(np.float32) * 2
        agree += chain.sample(row) == int(ds.sample(torch.from_numpy(row)))
    assert agree >= 39  # the same draws; float rounding may flip a rare boundary case


def test_device_distribution_matches_the_chain():
    logits = torch.tensor([0.3, 1.5, -0.2, 2.0, 0.9, -1.0, 1.1, 0.0])
    ds = DeviceSampler(temperature=0.7, top_k=5, top_p=1.0, min_p=0.0, seed=5, rng="torch")
    batch = logits.expand(20000, 8)
    counts = np.bincount(ds.sample(batch).numpy(), minlength=8)
    top5 = np.argsort(-logits.numpy())[:5]
    expected = np.zeros(8)
    expected[top5] = softmax(logits.numpy()[top5] / 0.7)
    assert chi2_pvalue(counts, expected) > 1e-4


def test_top_p_and_min_p_cuts():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1]))
    out = DeviceSampler(temperature=1.0, top_k=0, top_p=0.65, min_p=0.0, seed=1).sample(logits, return_candidates=True)
    assert out.probs[:2].sum().item() == pytest.approx(1.0) and out.probs[2:].sum().item() == 0
    out = DeviceSampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.6, seed=1).sample(logits, return_candidates=True)
    assert (out.probs > 0).sum().item() == 2  # 0.3 / 0.4 >= 0.6, 0.2 / 0.4 is not


def test_from_params_refuses_samplers_it_lacks():
    with pytest.raises(ValueError, match="penalties"):
        DeviceSampler.from_params(SamplingParams(repeat_penalty=1.1))
    with pytest.raises(ValueError, match="order"):
        DeviceSampler.from_params(SamplingParams(samplers="temperature;top_k"))
    with pytest.raises(TypeError, match="floating point"):
        DeviceSampler().sample(torch.zeros(3, dtype=torch.long))


@pytest.mark.parametrize("temperature", [0.8, 0.0])
def test_one_pass_resample_on_reject_draws_what_two_passes_draw(temperature: float):
    # the CUDA grammar path samples the raw and the masked row in one pass; the stream must end
    # where drawing, checking and redrawing one by one leaves it, token for token
    rng = np.random.default_rng(5)
    V, n_text = 300, 290                         # a padded vocabulary: columns past the tokenizer's
    one, two = (DeviceSampler(seed=11, temperature=temperature, top_k=20) for _ in range(2))
    rejected = 0
    for _ in range(60):
        logits = torch.from_numpy(rng.standard_normal(V).astype(np.float32) * 3)
        allowed = np.zeros(n_text, dtype=bool)
        allowed[rng.choice(n_text, size=int(rng.integers(1, 200)), replace=False)] = True
        bitmask = bool_to_bitmask(allowed)
        raw, redrawn, ok = one.sample_checked(logits, bitmask, n_text)
        expected = int(two.sample(logits))
        if expected < n_text and allowed[expected]:
            assert raw == expected
            one.commit_draws(1)
            continue
        rejected += 1
        masked = logits[:n_text].clone()
        expected = int(two.sample(masked, torch.from_numpy(bitmask)))
        assert (raw, redrawn, ok) == (raw, expected, True) and not (raw < n_text and allowed[raw])
        one.commit_draws(2)
    assert rejected > 10


def test_one_pass_resample_reports_a_mask_that_leaves_nothing():
    logits = torch.tensor([0.0, float("-inf"), 1.0, 2.0])
    bitmask = bool_to_bitmask(np.array([False, True, False, False]))
    raw, _, ok = DeviceSampler(seed=1).sample_checked(logits, bitmask, 4)
    assert raw in (0, 2, 3) and ok is False
