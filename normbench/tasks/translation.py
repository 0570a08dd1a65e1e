"""Translation: label-smoothed cross entropy on token batches, perplexity, BLEU.

The data come from `normbench.data` (parallel text → BPE ids); training batches are the length
buckets of `normbench.tasks.batching.TokenBatches` (at most ``max_tokens`` padded tokens each), in
a fresh order each epoch. The loss is the label-smoothed
cross entropy over real target tokens (padding ignored), averaged per token; throughput counts
target tokens (``perf/tokens_per_s``, fairseq's "wps").

Evaluation: ``val/loss`` (label-smoothed), ``val/nll_loss`` and ``val/ppl`` = exp(nll per token)
on the validation split; ``val/bleu`` and ``test/bleu`` from beam search (``beam``, ``lenpen``),
BPE removed, scored with sacrebleu on the pre-tokenized, lowercased references with
``tokenize="none"`` (tokenized BLEU, as fairseq reports for IWSLT14). The sacrebleu signature is
printed and written to ``sacrebleu.txt`` in the run directory, and what was scored beside it:
``translations/<split>.hyp`` (the latest evaluation's hypotheses, BPE removed, one per line) and
``translations/<split>.ref`` (the references), so the BLEU can be checked and the outputs scored
with other metrics (``sacrebleu -tok none translations/test.ref < translations/test.hyp``).

The data sets ``iwslt14`` (a local folder in fairseq's layout, or a Hub data set) and
``synthetic_translation`` are registered here: their configs and the builders that return a
`TranslationTask`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from normbench.base.errors import ConfigError, DatasetMissingError, require, require_in, require_seed
from normbench.base.output import atomic_write_text, info
from normbench.data.bpe import SPECIALS
from normbench.data.parallel_text import (
    PRETOKENIZERS,
    ParallelText,
    load_parallel_folder,
    load_parallel_hub,
    split_files,
)
from normbench.data.registry import DatasetConfig, register_dataset
from normbench.data.synthetic_translation import write_synthetic_translation
from normbench.data.translation import TranslationData, prepare
from normbench.models.decoding import beam_search, greedy_search, max_decode_len
from normbench.models.unwrap import unwrap
from normbench.tasks.base import StepOutput
from normbench.tasks.batching import TokenBatches, TranslationBatch, token_buckets


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float, ignore_index: int) -> tuple[Tensor, Tensor]:
    """Sums over the non-ignored tokens of the label-smoothed loss and of the NLL.

    With p = softmax(logits) over V classes: loss = (1 − ε)·(−log p_target) + ε/V · Σ_v (−log p_v),
    the definition of ``F.cross_entropy(label_smoothing=ε)``."""
    logp = torch.log_softmax(logits, dim=-1)  # (..., V)
    keep = target != ignore_index
    nll = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    smooth = -logp.sum(-1)
    loss = (1 - epsilon) * nll + epsilon / logits.shape[-1] * smooth
    return loss.masked_fill(~keep, 0.0).sum(), nll.masked_fill(~keep, 0.0).sum()  # no boolean indexing: no sync


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
        self, data: TranslationData, cfg: TranslationConfig, device: torch.device, run_dir: Path | None
    ) -> None:
        self.data = data
        self.vocab = data.vocab
        self.device = device
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.max_tokens = cfg.max_tokens
        self.label_smoothing = cfg.label_smoothing
        self.beam, self.lenpen = cfg.beam, cfg.lenpen
        self.max_len_a, self.max_len_b = cfg.max_len_a, cfg.max_len_b
        self.eval_bleu = cfg.eval_bleu
        self.bleu_max_sentences = cfg.bleu_max_sentences
        self.train = TokenBatches(*data.splits["train"], self.vocab, self.max_tokens, cfg.bucket_by_length)
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
        model = unwrap(model)  # the bare model under DDP and compile: its encode, decode, max_positions
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
            max_len = min(max_len, model.max_positions - 1)  # BOS takes a position
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
        hypotheses = self.translate(model, src)
        score, signature = corpus_bleu(hypotheses, refs)
        if self.run_dir is not None:
            self.write_translations(split, hypotheses, refs)
        if signature != self.signature:
            self.signature = signature
            info(f"[normbench] sacrebleu signature: {signature}")
            if self.run_dir is not None:
                self.run_dir.mkdir(parents=True, exist_ok=True)
                (self.run_dir / "sacrebleu.txt").write_text(signature + "\n")
        return score

    def write_translations(self, split: str, hypotheses: Sequence[str], references: Sequence[str]) -> None:
        """``translations/<split>.hyp`` and ``.ref`` in the run directory, one sentence per line."""
        assert self.run_dir is not None
        folder = self.run_dir / "translations"
        folder.mkdir(parents=True, exist_ok=True)
        for ext, lines in (("hyp", hypotheses), ("ref", references)):
            atomic_write_text(folder / f"{split}.{ext}", "".join(line.replace("\n", " ") + "\n" for line in lines))

    def evaluate_loss(self, model: nn.Module) -> dict[str, float]:
        """``val/loss`` (label-smoothed, as training), ``val/nll_loss``, ``val/ppl`` over the whole
        validation split, teacher-forced: no decoding. Call under ``no_grad`` in eval mode."""
        sums = {"loss_sum": 0.0, "nll_sum": 0.0, "count": 0.0}
        for batch in self.valid.batches():
            out = self.forward_loss(model, batch.to(self.device))
            for k, val in out.stats.items():
                sums[k] += float(val)
        return self.summarize(sums, "val")

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """``val/loss``, ``val/nll_loss``, ``val/ppl``; with ``eval_bleu`` also ``val/bleu`` and
        ``test/bleu``. Call under ``no_grad`` with the model in eval mode."""
        metrics = self.evaluate_loss(model)
        if self.eval_bleu:
            metrics["val/bleu"] = self.bleu(model, "valid")
            metrics["test/bleu"] = self.bleu(model, "test")
        return metrics


# --- registered data sets ----------------------------------------------------------------------


@dataclass
class TranslationConfig(DatasetConfig):
    """Keys shared by the translation data sets: preprocessing, batching and evaluation."""

    src_lang: str = "de"
    tgt_lang: str = "en"
    lowercase: bool = True
    pretokenize: str = "none"
    """``none``: the text is already tokenized (fairseq's IWSLT14); ``punct``: raw text."""
    vocab_size: int = 10000
    """Size of the joint BPE vocabulary, specials and alphabet included."""
    cache_dir: str | None = None
    """Where the BPE goes when the data folder is read-only; default ``~/.cache/normbench/bpe``."""
    max_tokens: int = 4096
    """Padded tokens per batch (translation batches by tokens; the run's ``batch_size`` does not apply)."""
    bucket_by_length: bool = True
    """Training batches of similar lengths (little padding); false: lengths mixed (much padding)."""
    max_positions: int = 1024
    label_smoothing: float = 0.1
    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    """Decoding stops at ``max_len_a`` × (longest source in the batch) + ``max_len_b`` tokens."""
    eval_bleu: bool = True
    bleu_max_sentences: int | None = None
    """Score only the first N sentences of valid/test (quick checks); null: all of them."""

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise ConfigError(f"dataset.beam={self.beam} must be at least 1")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"dataset.label_smoothing={self.label_smoothing} must be in [0, 1)")
        if self.max_tokens <= 0:
            raise ConfigError(f"dataset.max_tokens={self.max_tokens} must be positive")
        pretokenizers, specials = ", ".join(PRETOKENIZERS), len(SPECIALS)
        require(self.pretokenize in PRETOKENIZERS, "dataset.pretokenize", self.pretokenize, f"one of {pretokenizers}")
        require(self.vocab_size > specials, "dataset.vocab_size", self.vocab_size, f"> {specials} (the special tokens)")
        require(self.max_positions >= 2, "dataset.max_positions", self.max_positions, ">= 2 (one token and EOS)")
        require(math.isfinite(self.lenpen), "dataset.lenpen", self.lenpen, "finite")
        # decoding stops at max_len_a · (the longest source) + max_len_b tokens: at least one
        require_in("dataset.max_len_a", self.max_len_a, "[0, inf)")
        require(self.max_len_b >= 0, "dataset.max_len_b", self.max_len_b, ">= 0")
        require(self.max_len_a > 0 or self.max_len_b > 0, "dataset.max_len_b", 0, "> 0 when dataset.max_len_a=0")
        n = self.bleu_max_sentences
        require(n is None or n > 0, "dataset.bleu_max_sentences", n, "a positive integer (or null: all)")

    def longest_sequence(self) -> int | None:
        return self.max_positions


@dataclass
class IWSLT14Config(TranslationConfig):
    root: str | None = "data/iwslt14.tokenized.de-en"
    hub: str | None = None
    """A Hub data set with a ``translation`` column, used instead of ``root`` (needs network)."""
    hub_revision: str | None = "refs/convert/parquet"


@dataclass
class SyntheticTranslationConfig(TranslationConfig):
    root: str | None = None
    """Where to write the files; default ``<run dir>/data``."""
    vocab_size: int = 200
    max_tokens: int = 1024
    num_train: int = 4000
    num_valid: int = 200
    num_test: int = 200
    num_words: int = 40
    min_len: int = 3
    max_len: int = 12
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("num_train", "num_valid", "num_test", "num_words"):
            require(getattr(self, key) > 0, f"dataset.{key}", getattr(self, key), "a positive integer")
        require(self.min_len >= 1, "dataset.min_len", self.min_len, ">= 1")
        require(self.max_len >= self.min_len, "dataset.max_len", self.max_len, f">= dataset.min_len={self.min_len}")
        require_seed("dataset.seed", self.seed)


def build_translation_task(
    text: dict[str, ParallelText], root: Path | None, cfg: TranslationConfig, device: torch.device, run_dir: Path
) -> TranslationTask:
    """BPE ids of ``text`` (`normbench.data.translation.prepare`) wrapped in a `TranslationTask`."""
    data = prepare(
        text,
        root=root,
        train_files=split_files(root, "train", cfg.src_lang, cfg.tgt_lang) if root is not None else None,
        vocab_size=cfg.vocab_size,
        lowercase=cfg.lowercase,
        pretokenize_mode=cfg.pretokenize,
        cache_dir=cfg.cache_dir,
        max_positions=cfg.max_positions,
        langs=(cfg.src_lang, cfg.tgt_lang),
    )
    return TranslationTask(data, cfg, device, run_dir)


@register_dataset("iwslt14", IWSLT14Config, input_kind="sequence")
def iwslt14(cfg: IWSLT14Config, device: torch.device, run_dir: Path, **_: int) -> TranslationTask:
    """A local folder in fairseq's layout (``dataset.root``) or a Hub data set (``dataset.hub``);
    batches by ``dataset.max_tokens`` (the run's ``batch_size`` does not apply)."""
    if cfg.hub:
        text = load_parallel_hub(cfg.hub, cfg.src_lang, cfg.tgt_lang, cfg.hub_revision)
        return build_translation_task(text, None, cfg, device, run_dir)
    if not cfg.root:
        raise DatasetMissingError("dataset=iwslt14 needs dataset.root=<folder> or dataset.hub=<Hub data set>")
    root = Path(cfg.root).expanduser()
    text = load_parallel_folder(root, cfg.src_lang, cfg.tgt_lang)
    return build_translation_task(text, root, cfg, device, run_dir)


@register_dataset("synthetic_translation", SyntheticTranslationConfig, input_kind="sequence")
def synthetic_translation(
    cfg: SyntheticTranslationConfig, device: torch.device, run_dir: Path, **_: int
) -> TranslationTask:
    """Write the synthetic corpus in fairseq's layout (once per settings), then load it as iwslt14."""
    root = write_synthetic_translation(dataclasses.asdict(cfg), run_dir)
    text = load_parallel_folder(root, cfg.src_lang, cfg.tgt_lang)
    return build_translation_task(text, root, cfg, device, run_dir)
