"""Translation: label-smoothed cross entropy on token batches, perplexity, BLEU.

Training batches are the length buckets of `normbench.data.translation.TokenBatches` (at most
``max_tokens`` padded tokens each), in a fresh order each epoch. The loss is the label-smoothed
cross entropy over real target tokens (padding ignored), averaged per token; throughput counts
target tokens (``perf/tokens_per_s``, fairseq's "wps").

Evaluation: ``val/loss`` (label-smoothed), ``val/nll_loss`` and ``val/ppl`` = exp(nll per token)
on the validation split; ``val/bleu`` and ``test/bleu`` from beam search (``beam``, ``lenpen``),
BPE removed, scored with sacrebleu on the pre-tokenized, lowercased references with
``tokenize="none"`` (tokenized BLEU, as fairseq reports for IWSLT14). The sacrebleu signature is
printed and written to ``sacrebleu.txt`` in the run directory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from normbench.data.translation import TokenBatches, TranslationBatch, TranslationData, token_buckets
from normbench.errors import ConfigError
from normbench.models.decoding import beam_search, greedy_search, max_decode_len
from normbench.tasks.base import StepOutput


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Sums over the non-ignored tokens of the label-smoothed loss and of the NLL.

    With p = softmax(logits) over V classes: loss = (1 − ε)·(−log p_target) + ε/V · Σ_v (−log p_v),
    the definition of ``F.cross_entropy(label_smoothing=ε)``."""
    logp = torch.log_softmax(logits, dim=-1)  # (..., V)
    keep = target != ignore_index
    nll = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    smooth = -logp.sum(-1)
    loss = (1 - epsilon) * nll + epsilon / logits.shape[-1] * smooth
    return loss[keep].sum(), nll[keep].sum()


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> tuple[float, str]:
    """Tokenized BLEU (sacrebleu, ``tokenize="none"``) and its signature."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(tokenize="none", force=True)  # force: the text is tokenized on purpose
    score = bleu.corpus_score(list(hypotheses), [list(references)])
    return float(score.score), str(bleu.get_signature())


class TranslationTask:
    kind = "sequence"
    unit = "tokens"

    def __init__(
        self, data: TranslationData, cfg: Mapping[str, Any], device: torch.device, run_dir: Path | None
    ) -> None:
        if cfg["beam"] < 1:
            raise ConfigError(f"dataset.beam={cfg['beam']} must be at least 1")
        if not 0 <= cfg["label_smoothing"] < 1:
            raise ConfigError(f"dataset.label_smoothing={cfg['label_smoothing']} must be in [0, 1)")
        if cfg["max_tokens"] <= 0:
            raise ConfigError(f"dataset.max_tokens={cfg['max_tokens']} must be positive")
        self.data = data
        self.vocab = data.vocab
        self.device = device
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.max_tokens = int(cfg["max_tokens"])
        self.label_smoothing = float(cfg["label_smoothing"])
        self.beam, self.lenpen = int(cfg["beam"]), float(cfg["lenpen"])
        self.max_len_a, self.max_len_b = float(cfg["max_len_a"]), int(cfg["max_len_b"])
        self.eval_bleu = bool(cfg["eval_bleu"])
        self.bleu_max_sentences = cfg.get("bleu_max_sentences")
        self.train = TokenBatches(*data.splits["train"], self.vocab, self.max_tokens)
        self.valid = TokenBatches(*data.splits["valid"], self.vocab, self.max_tokens)
        self.signature: str | None = None

    def model_kwargs(self) -> dict[str, Any]:
        v = self.vocab
        return {"vocab_size": len(v), "pad_id": v.pad, "bos_id": v.bos, "eos_id": v.eos}

    def steps_per_epoch(self) -> int:
        return len(self.train)

    def train_batches(self, epoch: int, generator: torch.Generator) -> Iterator[TranslationBatch]:
        for batch in self.train.batches(generator):
            yield batch.to(self.device)

    def forward_loss(self, model: nn.Module, batch: TranslationBatch) -> StepOutput:
        logits = model(batch.src, batch.tgt_in)  # (B, T, V)
        loss_sum, nll_sum = label_smoothed_nll(logits.float(), batch.tgt_out, self.label_smoothing, batch.pad)
        count = (batch.tgt_out != batch.pad).sum()
        stats = {"loss_sum": loss_sum.detach(), "nll_sum": nll_sum.detach(), "count": count}
        return StepOutput(loss_sum / count.clamp(min=1), stats)

    def batch_units(self, batch: TranslationBatch) -> int:
        return batch.num_tokens

    def summarize(self, sums: dict[str, float], prefix: str) -> dict[str, float]:
        count = max(sums.get("count", 0.0), 1.0)
        nll = sums["nll_sum"] / count
        return {
            f"{prefix}/loss": sums["loss_sum"] / count,
            f"{prefix}/nll_loss": nll,
            f"{prefix}/ppl": math.exp(min(nll, 700.0)),
        }

    def translate(self, model: nn.Module, src: Sequence[Sequence[int]], beam: int | None = None) -> list[str]:
        """Decode source id lists (EOS appended here) into pre-tokenized text, BPE removed."""
        model = getattr(model, "_orig_mod", model)
        beam = self.beam if beam is None else beam
        v = self.vocab
        rows = [[*s, v.eos] for s in src]
        lens = [len(r) * beam for r in rows]
        out: list[str] = [""] * len(rows)
        for bucket in token_buckets(lens, lens, max(self.max_tokens, max(lens))):
            batch = torch.full((len(bucket), max(len(rows[i]) for i in bucket)), v.pad, dtype=torch.long)
            for j, i in enumerate(bucket):
                batch[j, : len(rows[i])] = torch.as_tensor(rows[i])
            batch = batch.to(self.device)
            max_len = max_decode_len(batch, v.pad, self.max_len_a, self.max_len_b)
            max_len = min(max_len, getattr(model, "max_positions", max_len + 1) - 1)  # BOS takes a position
            if beam == 1:
                hyps = greedy_search(model, batch, max_len)
            else:
                hyps = beam_search(model, batch, beam, max_len, self.lenpen)
            for i, ids in zip(bucket, hyps):
                out[i] = v.decode(ids)
        return out

    def bleu(self, model: nn.Module, split: str) -> float:
        src = self.data.splits[split][0]
        refs = self.data.references[split]
        if self.bleu_max_sentences is not None:
            src, refs = src[: self.bleu_max_sentences], refs[: self.bleu_max_sentences]
        score, signature = corpus_bleu(self.translate(model, src), refs)
        if signature != self.signature:
            self.signature = signature
            print(f"[normbench] sacrebleu signature: {signature}", flush=True)
            if self.run_dir is not None:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                (self.run_dir / "sacrebleu.txt").write_text(signature + "\n")
        return score

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """``val/loss``, ``val/nll_loss``, ``val/ppl``; with ``eval_bleu`` also ``val/bleu`` and
        ``test/bleu``. Call under ``no_grad`` with the model in eval mode."""
        sums = {"loss_sum": 0.0, "nll_sum": 0.0, "count": 0.0}
        for batch in self.valid.batches():
            out = self.forward_loss(model, batch.to(self.device))
            for k, val in out.stats.items():
                sums[k] += float(val)
        metrics = self.summarize(sums, "val")
        if self.eval_bleu:
            metrics["val/bleu"] = self.bleu(model, "valid")
            metrics["test/bleu"] = self.bleu(model, "test")
        return metrics
