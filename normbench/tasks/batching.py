"""Token batching for translation: length buckets of at most ``max_tokens`` padded tokens (as
fairseq counts them) and the padded source / decoder-input / decoder-target tensors of a batch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from normbench.base.errors import ConfigError
from normbench.data.bpe import Vocabulary
from normbench.placement.hardware import upload


@dataclass
class TranslationBatch:
    src: Tensor
    """(B, S) source ids, EOS-terminated, right-padded."""
    tgt_in: Tensor
    """(B, T) decoder input: BOS + target."""
    tgt_out: Tensor
    """(B, T) what the decoder should predict: target + EOS."""
    pad: int
    index: Tensor
    """(B,) positions of the pairs in their split (stays on the host)."""
    tgt_lengths: Tensor
    """(B,) real tokens of each ``tgt_out`` row (stays on the host: counting them reads no device)."""

    @property
    def num_tokens(self) -> int:
        return sum(self.tgt_lengths.tolist())  # a host tensor: no device is read

    def to(self, device: torch.device) -> TranslationBatch:
        return TranslationBatch(
            upload(self.src, device),  # pinned and asynchronous on CUDA: no host sync
            upload(self.tgt_in, device),
            upload(self.tgt_out, device),
            self.pad,
            self.index,
            self.tgt_lengths,
        )


def pad_sequences(seqs: Sequence[Sequence[int]], pad: int) -> Tensor:
    """Right-pad to the longest sequence: (B, max_len) int64."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def token_buckets(
    src_lens: Sequence[int], tgt_lens: Sequence[int], max_tokens: int, by_length: bool = True
) -> list[list[int]]:
    """Group pairs into batches of at most ``max_tokens`` padded tokens (as fairseq counts them:
    sentences × the longest source or target in the batch), after sorting by length so that
    pairs of similar length share a batch; ``by_length=False``: in one fixed random order
    instead (seed 0), so that a batch mixes lengths and holds much padding (the padding ablation).
    Deterministic; order of the batches is the caller's."""
    longest_pair = max((max(s, t) for s, t in zip(src_lens, tgt_lens)), default=0)
    if longest_pair > max_tokens:
        raise ConfigError(
            f"dataset.max_tokens={max_tokens} is smaller than a sentence of {longest_pair} tokens; raise it "
            f"or lower dataset.max_positions"
        )
    if by_length:
        order = sorted(range(len(src_lens)), key=lambda i: (tgt_lens[i], src_lens[i], i))
    else:
        order = torch.randperm(len(src_lens), generator=torch.Generator().manual_seed(0)).tolist()
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        n = max(src_lens[i], tgt_lens[i])
        if current and (len(current) + 1) * max(longest, n) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


class TokenBatches:
    """The pairs of one split, encoded and bucketed into padded token batches."""

    def __init__(
        self, src: list[list[int]], tgt: list[list[int]], vocab: Vocabulary, max_tokens: int, by_length: bool = True
    ) -> None:
        self.vocab = vocab
        self.src = [s + [vocab.eos] for s in src]
        self.tgt = tgt
        self.buckets = token_buckets([len(s) for s in self.src], [len(t) + 1 for t in tgt], max_tokens, by_length)

    def __len__(self) -> int:
        return len(self.buckets)

    def batch(self, indices: Sequence[int]) -> TranslationBatch:
        v = self.vocab
        return TranslationBatch(
            src=pad_sequences([self.src[i] for i in indices], v.pad),
            tgt_in=pad_sequences([[v.bos, *self.tgt[i]] for i in indices], v.pad),
            tgt_out=pad_sequences([[*self.tgt[i], v.eos] for i in indices], v.pad),
            pad=v.pad,
            index=torch.as_tensor(list(indices)),
            tgt_lengths=torch.as_tensor([len(self.tgt[i]) + 1 for i in indices]),
        )

    def batches(self, generator: torch.Generator | None = None) -> Iterator[TranslationBatch]:
        """Every bucket once; in a fresh random order when a generator is given."""
        order = (
            range(len(self.buckets))
            if generator is None
            else torch.randperm(len(self.buckets), generator=generator).tolist()
        )
        for b in order:
            yield self.batch(self.buckets[b])
