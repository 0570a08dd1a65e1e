"""claims.md says which runs its claims count (issue 60: interrupted or diverged runs are never
pooled silently)."""

from __future__ import annotations

from normbench.analysis.wording.claims_text import runs_counted


def test_claims_md_names_the_claims_whose_arms_hold_a_diverged_run() -> None:
    rows = [{"id": "a", "short": "BN trains at a higher lr", "a_diverged": "0", "b_diverged": "3"},
            {"id": "b", "short": "LN = BN", "a_diverged": "", "b_diverged": "0"}]  # fmt: skip
    line = runs_counted(rows)
    assert "interrupted, failed, killed) is left out" in line and "worst value" in line
    assert line.endswith("diverged runs in: BN trains at a higher lr (0 + 3).") and "LN = BN" not in line
    assert runs_counted(rows[1:]).endswith("no judged arm here holds a diverged run.")
