"""What a figure calls things: arms as the papers name them (PN-V, not ``pn_v``), metrics in words
(test BLEU, not ``test/bleu``), and the scope line every title carries (model depth and width,
data set, steps), read from the runs' configs (issue 57)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from normbench.analysis.judging.per_run import setting

ARM_NAMES = {
    "none": "no norm",
    "bn": "BN",
    "bn_noisy": "noisy BN",
    "noise_only": "noise only",
    "brn": "BRN",
    "gn": "GN",
    "ln": "LN",
    "ln_sample": "LN (per sample)",
    "in": "IN",
    "rms": "RMSNorm",
    "prms": "pRMSNorm",
    "pn": "PN",
    "pn_v": "PN-V",
    "bn_l1": "ℓ1 BN",
    "bn_l2": "ℓ2 BN",
    "bn_linf": "ℓ∞ BN",
}
"""A norm's config name → its name in the papers (Shen et al. 2020's PN-V, Zhang & Sennrich's pRMSNorm): the
one table of arm names, for the figures and the words alike (`normbench.analysis.wording.present`)."""
WORDS = ("in", "none")
"""Norm names that are English words too: replaced only as a whole label or before a bracket."""
_ARM = re.compile(r"(?<![\w-])(" + "|".join(sorted((re.escape(k) for k in ARM_NAMES if k not in WORDS), key=len,
                                                    reverse=True)) + r")(?![\w-])")  # fmt: skip
_WORD = re.compile(r"^(in|none)(?=$| \()")
METRIC_NAMES = {
    "test/bleu": "test BLEU",
    "val/bleu": "validation BLEU",
    "val/acc": "validation accuracy",
    "test/acc": "test accuracy",
    "val/loss": "validation loss",
    "train/loss": "training loss",
    "train/batch_loss": "training loss",
}
MODEL_NAMES = {"transformer_tiny": "Transformer", "transformer_iwslt": "Transformer", "vgg11": "VGG11",
               "vgg16": "VGG16", "resnet20": "ResNet20"}  # fmt: skip
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "iwslt14": "IWSLT14 de-en",
                 "synthetic_images": "synthetic images", "synthetic_translation": "synthetic translation"}  # fmt: skip


def arm_name(label: str) -> str:
    """``label`` with every norm's config name replaced by the paper's: ``pn_v`` → ``PN-V``,
    ``bn masked (mixed)`` → ``BN masked (mixed)``, ``pn (enc) / ln (dec)`` → ``PN (enc) / LN (dec)``;
    ``in`` and ``none`` only as the whole label or before a bracket (``groups in every layer`` stays)."""
    label = _WORD.sub(lambda m: ARM_NAMES[m.group(1)], label)
    return _ARM.sub(lambda m: ARM_NAMES[m.group(1)], label)


def metric_name(key: str) -> str:
    """A logged key in words: ``test/bleu`` → ``test BLEU``; an unknown key: its last part, spaced."""
    return METRIC_NAMES.get(key, key.rsplit("/", 1)[-1].replace("_", " "))


def _one(values: Sequence[Any]) -> str:
    """The values as one string: ``128`` when all agree, ``64-128`` (numbers) or ``a / b`` when not,
    ``""`` when none."""
    got = {v for v in values if v is not None and v != ""}
    if not got:
        return ""
    if all(isinstance(v, (int, float)) for v in got):
        return str(min(got)) if len(got) == 1 else f"{min(got)}-{max(got)}"
    return " / ".join(sorted(map(str, got)))


def _model_words(runs: Sequence[Any]) -> tuple[str, str]:
    """One model's runs in words: its name with depth or layers (``ResNet20``, ``Transformer 2+2
    layers``) and its width (``""`` when the configs give none)."""

    def one(key: str) -> str:
        return _one([setting(r, key) for r in runs])

    model = one("model.name")
    name = MODEL_NAMES.get(model, model)
    enc, dec = one("model.encoder_layers"), one("model.decoder_layers")
    if enc or dec:
        name += f" {enc or '?'}+{dec or '?'} layers"
    depth = one("model.depth")
    if depth and model.startswith("resnet"):
        name = f"ResNet{depth}"
    return name, _one([setting(r, "model.d_model") or setting(r, "model.width") for r in runs])


def scope(runs: Sequence[Any]) -> str:
    """What the runs are, for a title: ``Transformer 2+2 layers, width 128, IWSLT14 de-en, 300 steps``
    (image models: their name and depth, e.g. ``ResNet8``); runs of several models name each with its
    own width (``ResNet20 / Transformer 2+2 layers (width 128)``); parts the configs do not give are
    left out. The runs: `Run` records or ``per_run.csv`` rows (`normbench.analysis.judging.per_run.setting`)."""
    if not runs:
        return ""
    by_model: dict[str, list[Any]] = {}
    for r in runs:
        by_model.setdefault(str(setting(r, "model.name") or ""), []).append(r)
    models = [_model_words(group) for _, group in sorted(by_model.items())]
    if len(models) == 1:
        parts = [models[0][0], f"width {models[0][1]}" if models[0][1] else ""]
    else:
        parts = [" / ".join(f"{name} (width {width})" if width else name for name, width in models)]
    datasets = sorted({str(d) for d in (setting(r, "dataset.name") for r in runs) if d})
    if datasets:
        parts.append(" / ".join(DATASET_NAMES.get(d, d) for d in datasets))
    ran = [r.final_step for r in runs if r.final_step and getattr(r, "status", "finished") != "diverged"]
    steps = _one(ran or [max((r.final_step for r in runs), default=0) or None])  # a diverged run stops early
    if steps:  # arms of other lengths (one epoch budget at batch 2 and 32): the range
        parts.append(f"{steps} steps")
    return ", ".join(p for p in parts if p)


def titled(title: str, runs: Sequence[Any]) -> str:
    """``title`` with the runs' `scope` on a second line."""
    where = scope(runs)
    return f"{title}\n{where}" if where else title
