"""The epoch's running sums (issue 61: one kernel a step): bit for bit the sums of one add a step,
in the order the statistics came."""

from __future__ import annotations

import torch

from normbench.run.loop.sums import RunningSums


def steps(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        {
            "loss_sum": torch.rand((), generator=g) * 64,
            "correct": torch.randint(0, 64, (), generator=g),
            "count": torch.full((), 64),
            "tokens": torch.randint(0, 10, (3,), generator=g),  # a statistic with a shape
        }
        for _ in range(n)
    ]


def one_add_a_step(rows: list[dict[str, torch.Tensor]], start: dict[str, torch.Tensor] | None = None) -> dict:
    sums = dict(start or {})
    for stats in rows:
        for k, v in stats.items():
            sums[k] = sums[k] + v if k in sums else v.clone()
    return sums


def test_the_sums_equal_one_add_a_step_bit_for_bit_whenever_read() -> None:
    rows = steps(37)
    running = RunningSums()
    for i, stats in enumerate(rows):
        running.add(stats)
        if i % 10 == 3:  # read at a log step: the same as the per-step sums so far
            got, want = running.totals(), one_add_a_step(rows[: i + 1])
            assert list(got) == list(want)
            assert all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)
    got, want = running.totals(), one_add_a_step(rows)
    assert list(got) == ["loss_sum", "correct", "count", "tokens"]
    assert all(torch.equal(got[k], want[k]) and got[k].dtype == want[k].dtype for k in want)
    assert int(got["count"]) == 37 * 64


def test_a_resumed_epoch_continues_from_its_sums() -> None:
    first, rest = steps(12, seed=1)[:5], steps(12, seed=1)[5:]
    start = one_add_a_step(first)
    running = RunningSums(start)
    for stats in rest:
        running.add(stats)
    want = one_add_a_step(first + rest)
    got = running.totals()
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_a_read_is_a_snapshot() -> None:
    running = RunningSums()
    running.add({"loss_sum": torch.tensor(1.5), "count": torch.tensor(2)})
    before = running.totals()
    running.add({"loss_sum": torch.tensor(2.0), "count": torch.tensor(2)})
    assert float(before["loss_sum"]) == 1.5 and int(before["count"]) == 2
    assert float(running.totals()["loss_sum"]) == 3.5 and int(running.totals()["count"]) == 4
