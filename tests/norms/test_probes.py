"""`normbench.norms.probes`: what a norm does, asked by running it.

Known answers: the norm families by their definitions (each norm's ``statistics`` in
tests/norms/specs.py: batch statistics: BN, noisy BN, Batch Renorm, PowerNorm, ℓp BN; statistics
over positions: GN, IN, per-sample LN over (C, T); state: the running estimates of the
batch-statistic norms), and hand-written toy norms that are in no
registry, whose answers follow from the axis they average over.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from normbench.norms import list_norms, norm_factory
from normbench.norms.probes import holds_state, mixes_positions, uses_batch_statistics
from tests.norms.specs import spec


def statistics(name: str) -> str:
    """``batch``, ``positions`` or ``none``: the norm's row in tests/norms/specs.py."""
    return spec(name).statistics


class MeanOver(nn.Module):
    """x minus its mean over ``dims`` (of the NTC layout): a norm no registry knows."""

    def __init__(self, num_features: int, layout: str = "NTC", dims: tuple[int, ...] = (0,)) -> None:
        super().__init__()
        self.num_features, self.layout, self.dims = num_features, layout, dims

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return x - x.mean(self.dims, keepdim=True)


@pytest.mark.parametrize("name", list_norms())
def test_batch_statistics_probe_matches_the_norm_family(name: str) -> None:
    factory = norm_factory(name)
    batch = statistics(name) == "batch"
    assert uses_batch_statistics(factory, 8, "NCHW") == batch
    assert uses_batch_statistics(factory, 8, "NTC") == batch
    built = factory(8, "NCHW")
    assert uses_batch_statistics(built) == batch  # a built norm: same answer


@pytest.mark.parametrize("name", list_norms())
def test_position_probe_matches_the_norm_family(name: str) -> None:
    factory = norm_factory(name)
    assert mixes_positions(factory, training=True) == (statistics(name) != "none")
    assert mixes_positions(factory, training=False) == (statistics(name) == "positions")  # running estimates


@pytest.mark.parametrize("name", list_norms())
def test_state_probe_matches_the_norm_family(name: str) -> None:
    assert holds_state(norm_factory(name)) == (statistics(name) == "batch")


@pytest.mark.parametrize(
    ("dims", "batch", "positions"),
    [((0,), True, False), ((1,), False, True), ((2,), False, False), ((0, 1), True, True)],
    ids=["over-N", "over-T", "over-C", "over-N-and-T"],
)
def test_a_norm_outside_the_registry_is_classified_by_what_it_averages(dims, batch, positions) -> None:
    def factory(num_features: int, layout: str) -> nn.Module:
        return MeanOver(num_features, layout, dims)

    assert uses_batch_statistics(factory, 8, "NTC") == batch
    assert mixes_positions(factory, training=True) == positions
    assert mixes_positions(MeanOver(8, dims=dims), training=False) == positions
    assert not holds_state(factory, 8, "NTC")


def test_probes_change_neither_the_norm_nor_the_random_streams() -> None:
    norm = norm_factory("bn")(8, "NCHW")
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    rng = torch.get_rng_state()
    assert holds_state(norm) and uses_batch_statistics(norm) and mixes_positions(norm, training=True)
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert norm.training  # its mode as it was


def test_a_module_that_is_not_a_norm_answers_false() -> None:
    linear = nn.Linear(4, 4)
    assert not uses_batch_statistics(linear) and not mixes_positions(linear) and not holds_state(linear)


def test_probes_run_while_a_model_is_built_on_meta() -> None:
    with torch.device("meta"):
        assert uses_batch_statistics(norm_factory("bn"), 8, "NCHW")
        assert mixes_positions(norm_factory("gn"), training=False)
        assert not holds_state(norm_factory("ln"))
