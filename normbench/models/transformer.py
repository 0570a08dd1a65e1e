"""Encoder-decoder Transformer (Vaswani et al. 2017) as fairseq's ``transformer_iwslt_de_en``.

6 + 6 layers, d_model 512, FFN 1024, 4 heads, dropout 0.3 (after the embeddings, each attention
block and each FFN), attention dropout 0.1, ReLU dropout 0.1, sinusoidal positions, token
embeddings scaled by sqrt(d_model), the decoder's input embedding shared with its output
projection (``share_all_embeddings``: the encoder's too, fairseq's ``--share-all-embeddings``).
``transformer_tiny`` is the same with 2 + 2 layers and d_model 128 for tests and CPU runs.

Norms: every norm is called as ``norm(x, mask)`` with x (B, T, C) in the ``NTC`` layout and mask
(B, T) True on real tokens, so that norms with batch (or per-sentence) statistics leave padding
out. ``norm_position``: ``post`` (x = norm(x + f(x)), the original Transformer and fairseq's
default) or ``pre`` (x = x + f(norm(x)), plus a final norm after each stack; Xiong et al. 2020;
what Shen et al.'s released PowerNorm scripts train, ``normalize_before=True``).
``encoder_norm`` / ``decoder_norm`` give each stack a full norm config
(``norm@model.encoder_norm=pn model.encoder_norm.groups=4``) or a bare name (its registered
defaults); unset, both take the run's ``norm`` with its settings. PowerNorm's setup:
``experiment=powernorm_mt`` (PN in the encoder, LN in the decoder, pre-norm).

A norm whose statistics mix time steps (batch statistics in training; per-sentence statistics
over T) lets the decoder see future target tokens; building such a decoder warns (see
`normbench.norms.probes.mixes_positions`). Decoding (greedy, beam search) lives in
`normbench.models.decoding`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.base.errors import ConfigError, require, require_in
from normbench.models.registry import ModelConfig, register_model
from normbench.norms.probes import mixes_positions
from normbench.norms.registry import NormLayer, norm_config, norm_factory

NORM_POSITIONS = ("pre", "post")


def sinusoidal_positions(num_positions: int, dim: int) -> Tensor:
    """(num_positions, dim): sin in the first half of the channels, cos in the second, with
    frequencies 10000^(−i / (dim/2 − 1)) as fairseq's ``SinusoidalPositionalEmbedding``."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float64) * -(math.log(10000.0) / max(half - 1, 1)))
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * freq[None]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = F.pad(table, (0, 1))
    return table.float()


class MultiheadAttention(nn.Module):
    """Scaled dot-product attention over ``heads`` heads, q/k/v/out projections with biases.

    ``attend``: (B, 1 or Tq, Tk) bool, True where a query may look at a key.
    ``cache``: a dict of this layer's past keys/values (self-attention: appended to at each
    decoding step; cross-attention: computed once from the encoder output)."""

    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        if dim % heads:
            raise ConfigError(f"model.d_model={dim} is not divisible by model.heads={heads}")
        self.heads, self.dropout = heads, dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(dim, dim) for _ in range(4))

    def _split(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        return x.view(b, t, self.heads, c // self.heads).transpose(1, 2)  # (B, H, T, C/H)

    def forward(
        self,
        query: Tensor,
        key_value: Tensor,
        attend: Tensor,
        cache: dict[str, Tensor] | None = None,
        static_kv: bool = False,
    ) -> Tensor:
        q = self._split(self.q_proj(query))
        if cache is not None and static_kv and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k, v = self._split(self.k_proj(key_value)), self._split(self.v_proj(key_value))
            if cache is not None and not static_kv and "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            if cache is not None:
                cache["k"], cache["v"] = k, v
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attend[:, None], dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, Tq, C/H)
        b, _, t, _ = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """Linear → ReLU → dropout → Linear."""

    def __init__(self, dim: int, hidden: int, activation_dropout: float) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.activation_dropout = activation_dropout

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.dropout(F.relu(self.fc1(x)), self.activation_dropout, self.training))


class Residual(nn.Module):
    """One sub-layer with its residual connection and its norm, pre or post."""

    def __init__(self, dim: int, norm_layer: NormLayer, norm_position: str, dropout: float) -> None:
        super().__init__()
        self.norm = norm_layer(dim, "NTC")
        self.pre = norm_position == "pre"
        self.dropout = dropout

    def forward(self, x: Tensor, mask: Tensor, sublayer) -> Tensor:
        if self.pre:
            return x + F.dropout(sublayer(self.norm(x, mask)), self.dropout, self.training)
        return self.norm(x + F.dropout(sublayer(x), self.dropout, self.training), mask)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiheadAttention(d, cfg.heads, cfg.attention_dropout)
        self.attn_block = Residual(d, norm_layer, cfg.norm_position, cfg.dropout)
        self.ffn = FeedForward(d, cfg.ffn_dim, cfg.activation_dropout)
        self.ffn_block = Residual(d, norm_layer, cfg.norm_position, cfg.dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        attend = mask[:, None, :]  # (B, 1, S): every query sees every real source token
        x = self.attn_block(x, mask, lambda h: self.self_attn(h, h, attend))
        return self.ffn_block(x, mask, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig, norm_layer: NormLayer) -> None:
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiheadAttention(d, cfg.heads, cfg.attention_dropout)
        self.self_attn_block = Residual(d, norm_layer, cfg.norm_position, cfg.dropout)
        self.cross_attn = MultiheadAttention(d, cfg.heads, cfg.attention_dropout)
        self.cross_attn_block = Residual(d, norm_layer, cfg.norm_position, cfg.dropout)
        self.ffn = FeedForward(d, cfg.ffn_dim, cfg.activation_dropout)
        self.ffn_block = Residual(d, norm_layer, cfg.norm_position, cfg.dropout)

    def forward(
        self, x: Tensor, mask: Tensor, self_attend: Tensor, memory: Tensor, cross_attend: Tensor, cache: dict | None
    ) -> Tensor:
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None
        x = self.self_attn_block(x, mask, lambda h: self.self_attn(h, h, self_attend, self_cache))
        x = self.cross_attn_block(x, mask, lambda h: self.cross_attn(h, memory, cross_attend, cross_cache, True))
        return self.ffn_block(x, mask, self.ffn)


class Embedding(nn.Module):
    """Token embedding × sqrt(d_model) + sinusoidal position, then dropout."""

    def __init__(self, vocab_size: int, dim: int, pad_id: int, max_positions: int, dropout: float) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.scale = math.sqrt(dim)
        self.dropout = dropout
        self.register_buffer("positions", sinusoidal_positions(max_positions, dim), persistent=False)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        t = tokens.shape[1]
        if offset + t > len(self.positions):
            raise ValueError(f"sequence of {offset + t} tokens exceeds model.max_positions={len(self.positions)}")
        x = self.scale * self.tokens(tokens) + self.positions[offset : offset + t].to(self.tokens.weight.dtype)
        return F.dropout(x, self.dropout, self.training)  # (B, T, C)


class DecoderCache:
    """Keys/values of past decoding steps, per layer; ``length`` tokens decoded so far."""

    def __init__(self, num_layers: int) -> None:
        self.layers: list[dict[str, dict[str, Tensor]]] = [{"self": {}, "cross": {}} for _ in range(num_layers)]
        self.length = 0

    def reorder(self, index: Tensor) -> None:
        """Keep rows ``index`` of the batch (beam search)."""
        for layer in self.layers:
            for part in layer.values():
                for k in part:
                    part[k] = part[k].index_select(0, index)


class Transformer(nn.Module):
    """``forward(src, tgt_in) -> logits (B, T, V)``; ``encode`` and ``decode`` for generation."""

    def __init__(
        self,
        cfg: TransformerConfig,
        encoder_norm: NormLayer,
        decoder_norm: NormLayer,
        vocab_size: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
    ) -> None:
        super().__init__()
        self.cfg = cfg  # checked by TransformerConfig.__post_init__
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        d = cfg.d_model
        self.encoder_embed = Embedding(vocab_size, d, pad_id, cfg.max_positions, cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg, encoder_norm) for _ in range(cfg.encoder_layers))
        self.decoder_embed = Embedding(vocab_size, d, pad_id, cfg.max_positions, cfg.dropout)
        if cfg.share_all_embeddings:
            self.decoder_embed.tokens = self.encoder_embed.tokens  # one table (fairseq --share-all-embeddings)
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg, decoder_norm) for _ in range(cfg.decoder_layers))
        pre = cfg.norm_position == "pre"
        self.encoder_final_norm = encoder_norm(d, "NTC") if pre else None
        self.decoder_final_norm = decoder_norm(d, "NTC") if pre else None
        self.output_proj = None if cfg.share_decoder_embeddings else nn.Linear(d, vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """fairseq's init: embeddings N(0, d^−½) with a zero padding row; linears Xavier-uniform
        with zero biases. Norms keep their own ``reset_parameters``."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for emb in (self.encoder_embed.tokens, self.decoder_embed.tokens):
            nn.init.normal_(emb.weight, 0.0, self.cfg.d_model**-0.5)
            with torch.no_grad():
                emb.weight[self.pad_id].zero_()

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) → memory (B, S, C) and its mask (B, S), True on real tokens."""
        mask = src != self.pad_id
        x = self.encoder_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, mask)
        if self.encoder_final_norm is not None:
            x = self.encoder_final_norm(x, mask)
        return x, mask

    def decode(self, tgt_in: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Logits (B, T, V) for decoder inputs ``tgt_in`` (B, T). With ``cache``, ``tgt_in`` holds
        only the new step's tokens, placed after the ``cache.length`` tokens already decoded."""
        offset = cache.length if cache is not None else 0
        mask = tgt_in != self.pad_id
        t = tgt_in.shape[1]
        causal = torch.ones(t, offset + t, dtype=torch.bool, device=tgt_in.device).tril(offset)  # (T, offset+T)
        self_attend = causal[None] if cache is not None else causal[None] & mask[:, None, :]
        cross_attend = src_mask[:, None, :]
        x = self.decoder_embed(tgt_in, offset)
        for i, layer in enumerate(self.decoder_layers):
            x = layer(x, mask, self_attend, memory, cross_attend, cache.layers[i] if cache is not None else None)
        if self.decoder_final_norm is not None:
            x = self.decoder_final_norm(x, mask)
        if cache is not None:
            cache.length += t
        weight = self.decoder_embed.tokens.weight if self.output_proj is None else self.output_proj.weight
        return F.linear(x, weight)  # (B, T, V)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)

    @property
    def max_positions(self) -> int:
        return self.cfg.max_positions

    def new_cache(self) -> DecoderCache:
        return DecoderCache(len(self.decoder_layers))


@dataclass
class TransformerConfig(ModelConfig):
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_model: int = 512
    ffn_dim: int = 1024
    heads: int = 4
    dropout: float = 0.3
    attention_dropout: float = 0.1
    activation_dropout: float = 0.1
    norm_position: str = "post"
    """``post`` (fairseq's default, the original Transformer) | ``pre`` (Shen et al.'s released
    PowerNorm / IWSLT14 scripts: ``normalize_before=True``; Xiong et al. 2020)."""
    encoder_norm: Any = None
    """The encoder's norm, a full norm config: ``norm@model.encoder_norm=pn
    model.encoder_norm.groups=4`` (a Hydra group choice plus keys, typed like ``norm``), or a bare
    name for its registered defaults; null: the run's ``norm``."""
    decoder_norm: Any = None
    """The decoder's norm, as ``encoder_norm``."""
    share_decoder_embeddings: bool = True
    """The decoder's input embedding is its output projection (fairseq's default)."""
    share_all_embeddings: bool = False
    """Encoder and decoder share one embedding table, which is also the output projection
    (fairseq's ``--share-all-embeddings``, as Shen et al.'s IWSLT14 script; needs a joint
    vocabulary, which normbench's BPE is)."""
    max_positions: int = 1024

    def __post_init__(self) -> None:
        for key in ("encoder_layers", "decoder_layers", "d_model", "ffn_dim", "heads"):
            require(getattr(self, key) > 0, f"model.{key}", getattr(self, key), "a positive integer")
        require(self.d_model % self.heads == 0, "model.heads", self.heads, f"a divisor of model.d_model={self.d_model}")
        for key in ("dropout", "attention_dropout", "activation_dropout"):
            require_in(f"model.{key}", getattr(self, key), "[0, 1)")
        if self.norm_position not in NORM_POSITIONS:
            raise ConfigError(f"model.norm_position={self.norm_position!r}; valid choices: {', '.join(NORM_POSITIONS)}")
        if self.share_all_embeddings and not self.share_decoder_embeddings:
            raise ConfigError(
                "model.share_all_embeddings=true shares the decoder's output projection too; "
                "it needs model.share_decoder_embeddings=true"
            )
        require(self.max_positions >= 2, "model.max_positions", self.max_positions, ">= 2 (BOS or EOS and one token)")
        for spec in (self.encoder_norm, self.decoder_norm):  # each checked by its norm's dataclass
            if spec is not None:  # (from the command line, `normbench.config.parse` names model.<key>)
                norm_config(spec)

    def positions(self) -> int | None:
        return self.max_positions

    def stack_norms(self) -> list[Any]:
        return [spec for spec in (self.encoder_norm, self.decoder_norm) if spec is not None]


@dataclass
class TransformerTinyConfig(TransformerConfig):
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_model: int = 128
    ffn_dim: int = 256
    heads: int = 4
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0


def stack_norm(spec: Any, run_norm: NormLayer) -> NormLayer:
    """The run's norm for ``None``; else the norm of ``spec`` (a norm config, or a bare name for
    its registered defaults), checked against its schema (`normbench.norms.registry.norm_config`)."""
    if spec is None:
        return run_norm
    return norm_factory(norm_config(spec))


def warn_if_decoder_sees_the_future(decoder_norm: NormLayer) -> None:
    for mode in ("training", "evaluation"):
        try:
            mixing = mixes_positions(decoder_norm, training=mode == "training")
        except NotImplementedError:  # a stand-in without a forward (config validation's probe): nothing to say
            return
        if mixing:
            warnings.warn(
                f"the decoder's norm mixes time steps in {mode} (its statistics span several tokens), so the "
                f"decoder sees future target tokens there; model.decoder_norm=ln keeps it causal",
                stacklevel=4,
            )


def _build(
    c: TransformerConfig,
    norm_layer: NormLayer,
    *,
    vocab_size: int,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    **_: Any,
) -> Transformer:
    """The sizes come from the translation task (``task.model_kwargs()``); without them this
    raises ``TypeError``, which config validation reads as "built later, with the data"."""
    encoder_norm, decoder_norm = stack_norm(c.encoder_norm, norm_layer), stack_norm(c.decoder_norm, norm_layer)
    warn_if_decoder_sees_the_future(decoder_norm)
    return Transformer(c, encoder_norm, decoder_norm, vocab_size, pad_id, bos_id, eos_id)


@register_model("transformer_iwslt", TransformerConfig, input_kind="sequence")
def transformer_iwslt(cfg: TransformerConfig, norm_layer: NormLayer, **task: Any) -> nn.Module:
    return _build(cfg, norm_layer, **task)


@register_model("transformer_tiny", TransformerTinyConfig, input_kind="sequence")
def transformer_tiny(cfg: TransformerTinyConfig, norm_layer: NormLayer, **task: Any) -> nn.Module:
    return _build(cfg, norm_layer, **task)
