"""Batched greedy decoding and beam search for encoder-decoder models.

The model provides ``encode(src) -> (memory, src_mask)``, ``decode(tokens, memory, src_mask,
cache) -> logits`` (one new step per call with a cache), ``new_cache()`` and ``bos_id`` /
``eos_id`` / ``pad_id``. Call under ``torch.no_grad()`` with the model in eval mode; a model
wrapped for DDP or compiled is searched through its bare module (`normbench.models.unwrap`).

Beam search follows fairseq's ``SequenceGenerator``: at each step the 2·K best continuations of
the K live hypotheses are ranked; an EOS among the top K finishes a hypothesis with score
(sum of token log-probabilities, EOS included) / length^lenpen (length counting the EOS); the K
best non-EOS continuations live on. A sentence is done once it has K finished hypotheses; at
the length limit the live ones are finished with a forced EOS. The best finished hypothesis
wins. With K = 1 this is greedy decoding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from normbench.models.unwrap import unwrap


def max_decode_len(src: Tensor, pad_id: int, max_len_a: float, max_len_b: int) -> int:
    """fairseq's limit: a × (longest source in the batch) + b tokens (EOS excluded)."""
    longest = int((src != pad_id).sum(1).max())
    return max(int(max_len_a * longest + max_len_b), 1)


def greedy_search(model: nn.Module, src: Tensor, max_len: int) -> list[list[int]]:
    """The argmax token (PAD and BOS excluded) at each step until EOS (or ``max_len`` tokens);
    EOS not included."""
    model = unwrap(model)
    memory, src_mask = model.encode(src)
    cache = model.new_cache()
    b = src.shape[0]
    tokens = torch.full((b, 1), model.bos_id, dtype=torch.long, device=src.device)
    out = torch.full((b, max_len), model.pad_id, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    for step in range(max_len):
        logits = model.decode(tokens, memory, src_mask, cache)[:, -1]  # (B, V)
        logits[:, [model.pad_id, model.bos_id]] = float("-inf")
        nxt = logits.argmax(-1)
        out[:, step] = torch.where(done, model.pad_id, nxt)
        done |= nxt == model.eos_id
        if bool(done.all()):
            break
        tokens = nxt[:, None]
    return [_strip(row.tolist(), model.eos_id, model.pad_id) for row in out]


def _strip(ids: list[int], eos: int, pad: int) -> list[int]:
    out = []
    for i in ids:
        if i in (eos, pad):
            break
        out.append(i)
    return out


def beam_search(model: nn.Module, src: Tensor, beam: int, max_len: int, lenpen: float = 1.0) -> list[list[int]]:
    """The best hypothesis per sentence (token ids, EOS not included)."""
    if beam < 1:
        raise ValueError(f"beam={beam} must be at least 1")
    model = unwrap(model)
    device = src.device
    b, k = src.shape[0], beam
    memory, src_mask = model.encode(src)
    rows = torch.arange(b, device=device).repeat_interleave(k)  # (B·K,) sentence of each row
    memory, src_mask = memory.index_select(0, rows), src_mask.index_select(0, rows)
    cache = model.new_cache()
    tokens = torch.full((b * k, 1), model.bos_id, dtype=torch.long, device=device)
    history = torch.empty((b * k, 0), dtype=torch.long, device=device)
    scores = torch.full((b, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all K rows start equal: only the first one may expand at step 0
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(b)]
    done = [False] * b
    for step in range(max_len + 1):
        logp = torch.log_softmax(model.decode(tokens, memory, src_mask, cache)[:, -1].float(), dim=-1)  # (B·K, V)
        vocab = logp.shape[-1]
        if step == max_len:  # force EOS
            forced = torch.full_like(logp, float("-inf"))
            forced[:, model.eos_id] = logp[:, model.eos_id]
            logp = forced
        logp[:, model.pad_id] = float("-inf")
        logp[:, model.bos_id] = float("-inf")
        cand = (scores.view(b * k, 1) + logp).view(b, k * vocab)
        top_scores, top_idx = cand.topk(min(2 * k, k * vocab), dim=1)  # (B, 2K)
        top_beam, top_tok = top_idx // vocab, top_idx % vocab
        is_eos = top_tok == model.eos_id
        # finish hypotheses whose EOS ranks among the top K
        for i, j in (is_eos[:, :k] & torch.isfinite(top_scores[:, :k])).nonzero().tolist():
            if done[i]:
                continue
            hyp = history[i * k + int(top_beam[i, j])].tolist()
            finished[i].append((float(top_scores[i, j]) / (step + 1) ** lenpen, hyp))
        for i in range(b):
            if not done[i] and len(finished[i]) >= k:
                done[i] = True
        if all(done) or step == max_len:
            break
        # the K best non-EOS continuations live on
        live_rank = torch.where(is_eos, float("inf"), torch.arange(is_eos.shape[1], device=device, dtype=torch.float))
        keep = live_rank.argsort(dim=1)[:, :k]  # (B, K) positions in the 2K candidates
        new_scores = top_scores.gather(1, keep)
        new_scores[torch.tensor(done, device=device)] = float("-inf")
        src_rows = (torch.arange(b, device=device)[:, None] * k + top_beam.gather(1, keep)).view(-1)
        new_tok = top_tok.gather(1, keep).view(-1, 1)
        history = torch.cat([history.index_select(0, src_rows), new_tok], dim=1)
        cache.reorder(src_rows)
        scores, tokens = new_scores, new_tok
    return [max(f, key=lambda s: s[0])[1] if f else [] for f in finished]
