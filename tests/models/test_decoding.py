"""Greedy decoding and beam search: against exhaustive search, beam 1 == greedy, batching."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor, nn

from normbench.models import build_model
from normbench.models.decoding import beam_search, greedy_search
from normbench.norms import norm_factory

PAD, BOS, EOS = 0, 1, 2
EOS_SCALE = 10.0


class MarkovModel(nn.Module):
    """A decoder whose next-token logits depend on (sentence, previous token, position) only,
    through a fixed random table: scores of whole hypotheses are then known exactly."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self, num_sentences: int, vocab: int, max_len: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = 3 * torch.randn(num_sentences, vocab, max_len + 1, vocab, generator=g, dtype=torch.float64)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return src[:, :1].double(), torch.ones_like(src, dtype=torch.bool)  # memory: the sentence id

    def new_cache(self):
        return _Cache()

    def decode(self, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache) -> Tensor:
        sentence = memory[:, 0].long()
        logits = self.table[sentence, tokens[:, -1], cache.length][:, None]  # (B, 1, V)
        cache.length += 1
        return logits


class _Cache:
    length = 0

    def reorder(self, index: Tensor) -> None:
        pass


def exhaustive_best(model: MarkovModel, sentence: int, max_len: int, lenpen: float) -> list[int]:
    """Every hypothesis of at most max_len words (ids 3..V-1) then EOS (forced after max_len words)."""
    vocab = model.table.shape[1]
    words = range(3, vocab)
    best, best_score = None, -math.inf
    for length in range(max_len + 1):
        for hyp in itertools.product(words, repeat=length):
            prev, total = BOS, 0.0
            for pos, tok in enumerate([*hyp, EOS]):  # log-probabilities normalized over all V (fairseq)
                total += float(torch.log_softmax(model.table[sentence, prev, pos], -1)[tok])
                prev = tok
            score = total / (length + 1) ** lenpen
            if score > best_score:
                best, best_score = list(hyp), score
    return best


@pytest.mark.parametrize("lenpen", [1.0, 0.0])
def test_wide_beam_finds_the_exhaustive_best(lenpen: float) -> None:
    max_len, vocab, sentences = 3, 6, 5
    model = MarkovModel(sentences, vocab, max_len, seed=0)
    src = torch.arange(sentences)[:, None].repeat(1, 2)
    hyps = beam_search(model, src, beam=200, max_len=max_len, lenpen=lenpen)
    assert hyps == [exhaustive_best(model, i, max_len, lenpen) for i in range(sentences)]


def test_beam_one_equals_greedy_on_the_markov_model() -> None:
    model = MarkovModel(8, 7, 6, seed=1)
    src = torch.arange(8)[:, None]
    assert beam_search(model, src, beam=1, max_len=6) == greedy_search(model, src, max_len=6)


def tiny_transformer(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = build_model(
        {"name": "transformer_tiny", "decoder_norm": "ln"},
        norm_factory("ln"),
        vocab_size=23,
        pad_id=0,
        bos_id=1,
        eos_id=2,
    )
    with torch.no_grad():  # a larger EOS logit, so that hypotheses end at different steps
        model.decoder_embed.tokens.weight[2].mul_(EOS_SCALE)
    return model.eval()


def sources(b: int = 6, s: int = 9, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 23, (b, s), generator=g)
    src[:, -1] = 2
    for i in range(b):
        src[i, s - 1 - i :] = 0
        src[i, s - 1 - i] = 2
    return src


@torch.no_grad()
def test_beam_one_equals_greedy_on_the_transformer() -> None:
    model, src = tiny_transformer(2), sources()
    greedy = greedy_search(model, src, max_len=12)
    assert len({len(h) for h in greedy}) > 1  # hypotheses of several lengths: the test means something
    assert beam_search(model, src, beam=1, max_len=12) == greedy


@torch.no_grad()
def test_cached_decoding_equals_full_recomputation() -> None:
    model, src = tiny_transformer(1), sources()
    memory, mask = model.encode(src)
    hyps = greedy_search(model, src, max_len=8)
    for i, hyp in enumerate(hyps):
        tokens = torch.tensor([[1, *hyp]])
        logits = model.decode(tokens, memory[i : i + 1], mask[i : i + 1])
        logits[..., :2] = -math.inf
        assert logits[0].argmax(-1).tolist()[: len(hyp)] == hyp  # each step's argmax, recomputed


@torch.no_grad()
def test_batched_beam_search_equals_one_sentence_at_a_time() -> None:
    model, src = tiny_transformer(2), sources()
    batched = beam_search(model, src, beam=5, max_len=10)
    for i in range(len(src)):
        row = src[i : i + 1, : int((src[i] != 0).sum())]
        assert beam_search(model, row, beam=5, max_len=10) == [batched[i]]
