"""The encoder-decoder Transformer with every norm: sizes, padding, causality, norm choice."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from normbench.base.errors import ConfigError
from normbench.models import build_model
from normbench.norms import NORMS, build_norm, list_norms, norm_factory
from normbench.norms.batch import BatchNorm
from normbench.norms.layer import RMSNorm
from normbench.norms.probes import mixes_positions
from normbench.tasks.translation import label_smoothed_nll

NORM_KW = {"gn": {"groups": 8}}
VOCAB = {"vocab_size": 37, "pad_id": 0, "bos_id": 1, "eos_id": 2}
NO_DROPOUT = {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0}


def factory(name: str, **kw):
    return norm_factory({"name": name, **NORM_KW.get(name, {}), **kw})


def per_channel_params(name: str, dim: int) -> int:
    return sum(p.numel() for p in build_norm(name, dim, "NTC", **NORM_KW.get(name, {})).parameters()) // dim


def tiny(norm: str, norm_kw: dict | None = None, **cfg) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_model({"name": "transformer_tiny", **cfg}, factory(norm, **(norm_kw or {})), **VOCAB)


@pytest.mark.parametrize("position", ["post", "pre"])
@pytest.mark.parametrize("norm", list_norms())
def test_transformer_iwslt_parameter_count(norm: str, position: str) -> None:
    # fairseq's transformer_iwslt_de_en with a 10,000-entry joint vocabulary, counted by hand:
    d, ffn, vocab = 512, 1024, 10_000
    attention = 4 * (d * d + d)  # q, k, v, out projections with biases
    feed_forward = d * ffn + ffn + ffn * d + d
    norm_params = per_channel_params(norm, d) * d
    encoder_layer = attention + feed_forward + 2 * norm_params
    decoder_layer = 2 * attention + feed_forward + 3 * norm_params
    embeddings = 2 * vocab * d  # encoder; decoder (shared with the output projection)
    final_norms = 2 * norm_params if position == "pre" else 0
    expected = 6 * encoder_layer + 6 * decoder_layer + embeddings + final_norms
    if norm == "ln":
        assert expected == 41_783_296 + final_norms
    with warnings.catch_warnings(), torch.device("meta"):  # shapes only: no 42M floats to fill, 30 times
        warnings.simplefilter("ignore")
        model = build_model(
            {"name": "transformer_iwslt", "norm_position": position},
            factory(norm),
            vocab_size=vocab,
            pad_id=0,
            bos_id=1,
            eos_id=2,
        )
    assert sum(p.numel() for p in model.parameters()) == expected


def batch(seed: int = 0, b: int = 4, s: int = 7, t: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random right-padded (src, tgt_in, tgt_out) with varied lengths and no pad inside."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 37, (b, s), generator=g)
    tgt = torch.randint(3, 37, (b, t + 1), generator=g)
    tgt[:, 0] = 1
    for i in range(b):
        src[i, s - i :] = 0
        tgt[i, t + 1 - i :] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def pad_right(x: torch.Tensor, extra: int) -> torch.Tensor:
    return torch.cat([x, torch.zeros(x.shape[0], extra, dtype=x.dtype)], dim=1)


@pytest.mark.parametrize("position", ["post", "pre"])
@pytest.mark.parametrize("norm", list_norms())
def test_every_norm_trains_a_step_and_no_batchnorm_is_left(norm: str, position: str) -> None:
    torch.manual_seed(0)
    model = tiny(norm, norm_position=position)
    has_bn = any(isinstance(m, (nn.modules.batchnorm._BatchNorm, BatchNorm)) for m in model.modules())
    assert has_bn == isinstance(build_norm(norm, 16, **NORM_KW.get(norm, {})), BatchNorm)  # only bn and its family
    assert not any(isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)) for m in model.modules())
    src, tgt_in, tgt_out = batch()
    logits = model(src, tgt_in)
    loss, _ = label_smoothed_nll(logits, tgt_out, 0.1, 0)
    loss.backward()
    assert logits.shape == (4, 6, 37) and torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.encoder_embed.tokens.weight.grad is not None and model.decoder_embed.tokens.weight.grad is not None


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("norm", list_norms())
def test_padding_changes_nothing_at_real_tokens(norm: str, training: bool) -> None:
    """Three more pad columns on both sides: same encoder output and same loss at real tokens.
    The noisy norms draw per activation, so a padded batch draws another stream; with r_mu =
    r_sigma = 0 their noise is the step's per-channel draw, the first of the stream."""
    torch.manual_seed(0)
    unit_noise = {"r_mu": 0.0, "r_sigma": 0.0} if norm in ("bn_noisy", "noise_only") else {}
    model = tiny(norm, unit_noise, **NO_DROPOUT).double()
    if not training:  # give running statistics something other than their initial values
        model.train()
        for seed in range(3):
            src, tgt_in, _ = batch(seed + 10)
            model(src, tgt_in)
    model.train(training)
    src, tgt_in, tgt_out = batch()
    results = []
    for extra in (0, 3):
        m = copy.deepcopy(model)  # the same running statistics before each forward
        s, ti, to = pad_right(src, extra), pad_right(tgt_in, extra), pad_right(tgt_out, extra)
        with torch.random.fork_rng(devices=[]):  # the same draws for norms that inject noise
            torch.manual_seed(1)
            memory, mask = m.encode(s)
            loss, nll = label_smoothed_nll(m.decode(ti, memory, mask), to, 0.1, 0)
        results.append((memory[:, : src.shape[1]][mask[:, : src.shape[1]]], loss, nll))
    (mem0, loss0, nll0), (mem1, loss1, nll1) = results
    torch.testing.assert_close(mem1, mem0, rtol=0, atol=1e-10)
    torch.testing.assert_close(loss1, loss0, rtol=0, atol=1e-10)
    torch.testing.assert_close(nll1, nll0, rtol=0, atol=1e-10)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("norm", list_norms())
def test_decoder_is_causal_unless_its_norm_mixes_positions(norm: str, training: bool) -> None:
    """Changing target token j changes no decoder output before j — exactly when the norm
    alone lets no position see another (`mixes_positions`, a behavioural probe)."""
    torch.manual_seed(0)
    model = tiny(norm, **NO_DROPOUT).double().train(training)
    src, tgt_in, _ = batch(b=3)
    tgt_in = tgt_in[:, :4].clone()
    tgt_in[:, 1:] = tgt_in[:, 1:].clamp(min=3)  # no padding: every position real
    changed = tgt_in.clone()
    changed[:, 3] = torch.where(changed[:, 3] == 5, 6, 5)
    outs = []
    for tokens in (tgt_in, changed):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            outs.append(copy.deepcopy(model)(src, tokens))
    causal = torch.allclose(outs[0][:, :3], outs[1][:, :3], rtol=0, atol=1e-10)
    assert causal == (not mixes_positions(factory(norm), training=training))
    assert not torch.allclose(outs[0][:, 3], outs[1][:, 3])  # the changed step itself does change


def stack_norms(model: nn.Module, stack: str) -> list[nn.Module]:
    return [m for n, m in model.named_modules() if n.startswith(f"{stack}_layers") and n.endswith(".norm")]


@pytest.mark.parametrize("name", list_norms())
def test_encoder_norm_by_name_gets_its_registered_defaults(name: str) -> None:
    model = tiny("ln", encoder_norm=name, decoder_norm="rms")
    defaults = NORMS.entry(name).config()
    encoder, decoder = stack_norms(model, "encoder"), stack_norms(model, "decoder")
    assert len(encoder) == 2 * 2 and len(decoder) == 2 * 3
    assert all(type(m) is NORMS.get(name) for m in encoder)
    assert all(getattr(m, "eps", defaults.eps) == defaults.eps for m in encoder)
    assert all(type(m) is RMSNorm and m.eps == NORMS.entry("rms").config().eps for m in decoder)


def test_run_norm_settings_reach_both_stacks_by_default() -> None:
    model = build_model({"name": "transformer_tiny"}, norm_factory({"name": "ln", "eps": 1e-3}), **VOCAB)
    norms = [m for n, m in model.named_modules() if n.endswith(".norm")]
    assert len(norms) == 2 * 2 + 2 * 3 and all(m.eps == 1e-3 for m in norms)


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown norm 'layernorm'; valid choices: .*ln"):
        tiny("ln", encoder_norm="layernorm")
    with pytest.raises(ConfigError, match="model.norm_position='middle'; valid choices: pre, post"):
        tiny("ln", norm_position="middle")
    with pytest.raises(TypeError, match="vocab_size"):  # sizes come from the data (validation builds it later)
        build_model({"name": "transformer_tiny"}, factory("ln"), num_classes=10)


def test_a_decoder_norm_that_mixes_positions_warns() -> None:
    with pytest.warns(UserWarning, match="model.decoder_norm=ln"):
        build_model({"name": "transformer_tiny"}, factory("bn"), **VOCAB)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_model({"name": "transformer_tiny", "decoder_norm": "ln"}, factory("bn"), **VOCAB)


def test_config_validation_reaches_the_norms_of_the_transformer() -> None:
    from functools import partial

    from normbench.models import MODELS
    from normbench.norms import NORMS, norm_factory
    from normbench.run.loop.validate import check_norm_in_model

    model, norm = MODELS.typed("transformer_tiny"), NORMS.typed({"name": "gn", "groups": 7})
    # no data yet: the model cannot be built, nothing to say
    assert check_norm_in_model(partial(build_model, model), norm_factory(norm), norm.name, 8) is False
    with pytest.raises(ConfigError, match="layer encoder_layers.0.attn_block.norm .128 channels.: norm.groups=7"):
        check_norm_in_model(partial(build_model, model, **VOCAB), norm_factory(norm), norm.name, 8)


def test_each_stack_takes_a_full_norm_config() -> None:
    """``model.encoder_norm`` as a norm config: its keys reach the encoder's norms (not the
    registered defaults); a bare name still means the defaults; a bad key is one ConfigError."""
    from normbench.norms.power import PowerNorm

    spec = {"name": "pn", "groups": 4, "warmup_iters": 7}
    model = tiny("ln", encoder_norm=spec, decoder_norm="ln", **NO_DROPOUT)
    encoder = [m for m in model.encoder_layers.modules() if isinstance(m, PowerNorm)]
    assert encoder and all((m.groups, m.warmup_iters) == (4, 7) for m in encoder)
    assert not any(isinstance(m, PowerNorm) for m in model.decoder_layers.modules())
    bare = tiny("ln", encoder_norm="pn", **NO_DROPOUT)
    assert {m.groups for m in bare.encoder_layers.modules() if isinstance(m, PowerNorm)} == {1}
    message = "norm.grups is not an option of norm=pn; did you mean norm.groups\\? norm=pn takes: .*groups"
    with pytest.raises(ConfigError, match=message):
        tiny("ln", encoder_norm={"name": "pn", "grups": 4})
    with pytest.raises(ConfigError, match="unknown norm 'pnn'"):
        tiny("ln", encoder_norm="pnn")


def test_the_hydra_group_form_composes_a_typed_norm_config() -> None:
    from hydra import compose, initialize_config_dir

    from normbench.cli.main import config_dir
    from normbench.cli.store import register_configs

    register_configs()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        group_form = ["experiment=quickstart_mt", "norm@model.encoder_norm=pn", "model.encoder_norm.groups=4"]
        cfg = compose("config", group_form)
        assert (cfg.model.encoder_norm.name, cfg.model.encoder_norm.groups, cfg.model.decoder_norm) == ("pn", 4, None)
        with pytest.raises(Exception, match="grups"):
            compose("config", ["experiment=quickstart_mt", "norm@model.encoder_norm=pn", "model.encoder_norm.grups=4"])


def test_share_all_embeddings_is_one_table() -> None:
    torch.manual_seed(0)
    shared = tiny("ln", share_all_embeddings=True, **NO_DROPOUT)
    separate = tiny("ln", **NO_DROPOUT)
    assert shared.encoder_embed.tokens.weight is shared.decoder_embed.tokens.weight
    d = shared.cfg.d_model
    n = sum(p.numel() for p in separate.parameters()) - sum(p.numel() for p in shared.parameters())
    assert n == VOCAB["vocab_size"] * d  # one table fewer; the output projection is the shared table
    src, tgt_in, tgt_out = batch()
    memory, mask = shared.encode(src)
    loss, _ = label_smoothed_nll(shared.decode(tgt_in, memory, mask), tgt_out, 0.1, 0)
    loss.backward()
    assert shared.encoder_embed.tokens.weight.grad is not None
    with pytest.raises(ConfigError, match="share_all_embeddings=true .* needs model.share_decoder_embeddings=true"):
        tiny("ln", share_all_embeddings=True, share_decoder_embeddings=False)
