"""A sweep job refused before it wrote (another run held its folder) is listed as refused, with its
reason, by the analysis too (issue 59), not as a job killed or crashed."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from normbench.analysis.loading.runs import load_local_runs
from normbench.base.layout import RunDir
from normbench.records.refusals import note_refused
from tests.faults import fault


def _job(sweep: Path, name: str, seed: int) -> Path:
    job = sweep / name
    files = RunDir(job)
    files.hydra.mkdir(parents=True)
    files.hydra_config.write_text(yaml.safe_dump({"norm": {"name": "bn"}, "seed": seed}))
    files.hydra_overrides.write_text(yaml.safe_dump([f"seed={seed}"]))  # Hydra writes both before normbench runs
    return job


@fault("a sweep's job whose folder another run holds, read by the analysis (issue 59)",
       "read as 'refused' with its reason, not as killed or crashed",
       "result")  # fmt: skip
def test_a_refused_job_reads_as_refused_with_its_reason(tmp_path: Path) -> None:
    refused, crashed = _job(tmp_path, "0", 0), _job(tmp_path, "1", 1)
    note_refused(refused, "another run holds this folder")
    runs = {r.name: r for r in load_local_runs([tmp_path], unfinished=True)}
    assert (runs["0"].status, runs["0"].summary["error"]) == ("refused", "another run holds this folder")
    assert runs["1"].status == "failed" and "killed or crashed" in runs["1"].summary["error"]
    assert not (crashed / "summary.json").exists() and json.loads(
        (tmp_path / ".normbench-refused" / "0.json").read_text()
    )["status"] == "refused"
