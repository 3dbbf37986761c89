"""llama.cpp's sampler chain in Python: candidates, samplers, the chain, the common sampler.

``SamplingParams(...).build(n_vocab)`` gives the chain llama.cpp would build for the same flags;
``make_sampler(name, **params)`` builds one sampler by its llama.cpp name; ``CommonSampler`` adds a
grammar in grammar-first or resample-on-reject mode. ``halter.sampling.device`` has the torch
path for accelerators.
"""
from halter.sampling.base import Sampler, SamplerChain
from halter.sampling.candidates import Candidates
from halter.sampling.common import CommonSampler
from halter.sampling.dry import Dry
from halter.sampling.grammar import GrammarSampler
from halter.sampling.params import (DEFAULT_SAMPLERS, SamplingParams, make_sampler, parse_samplers,
                                    parse_sampling_seq)
from halter.sampling.penalties import LogitBias, Penalties
from halter.sampling.rng import LLAMA_DEFAULT_SEED, Mt19937
from halter.sampling.selectors import Dist, Greedy, Mirostat, MirostatV2
from halter.sampling.temperature import TempExt, Temperature
from halter.sampling.truncation import MinP, TopK, TopNSigma, TopP, Typical, Xtc

__all__ = [
    "Candidates", "CommonSampler", "DEFAULT_SAMPLERS", "Dist", "Dry", "GrammarSampler", "Greedy",
    "LLAMA_DEFAULT_SEED", "LogitBias", "MinP", "Mirostat", "MirostatV2", "Mt19937", "Penalties", "Sampler",
    "SamplerChain", "SamplingParams", "TempExt", "Temperature", "TopK", "TopNSigma", "TopP", "Typical", "Xtc",
    "make_sampler", "parse_samplers", "parse_sampling_seq",
]
