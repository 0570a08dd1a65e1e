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


def test_correct_answers_counted_later_equal_a_count_a_step_whenever_read() -> None:
    """The task's correct answers as a `RowSum` (issue 61: argmax, compare and sum once per fold,
    not per step): the same integer as counting each step, read at any step, with batches of
    different sizes (the epoch's last), across folds, and after a read."""
    from normbench.tasks.base import RowSum
    from normbench.tasks.classification import correct_answers

    g = torch.Generator().manual_seed(3)
    running, by_step = RunningSums(), torch.zeros((), dtype=torch.long)
    sizes = [8] * 40 + [5]
    for i, n in enumerate(sizes):
        logits, labels = torch.randn(n, 10, generator=g), torch.randint(0, 10, (n,), generator=g)
        logits[0, :2] = 1e9  # a tie: argmax takes the first, per step and concatenated alike
        running.add({"loss_sum": torch.rand((), generator=g), "correct": RowSum(correct_answers, (logits, labels))})
        by_step = by_step + (logits.argmax(-1) == labels).sum()
        assert len(running._rows["correct"]) <= RunningSums.FOLD_EVERY  # at most a fold's steps of rows kept
        if i in (3, 16, 31, 40):
            got = running.totals()
            assert list(got) == ["loss_sum", "correct"]
            assert got["correct"].dtype == torch.int64 and int(got["correct"]) == int(by_step)


def test_a_row_sum_reads_as_its_value() -> None:
    from normbench.tasks.base import RowSum, stat_values
    from normbench.tasks.classification import correct_answers

    logits, labels = torch.tensor([[0.0, 2.0], [3.0, 1.0], [0.5, 0.4]]), torch.tensor([1, 1, 0])
    row = RowSum(correct_answers, (logits, labels))
    assert float(row) == 2.0 and int(row.value()) == 2
    assert stat_values({"correct": row, "count": torch.tensor(3)}) == {"correct": row.value(), "count": torch.tensor(3)}
