"""Hydra submitit launchers whose requeued jobs resume from their last checkpoint.

When SLURM preempts a job or its time runs out, submitit signals it (``USR2``) and calls the
launcher's ``checkpoint`` hook, which returns the submission to requeue. Hydra's own launchers
requeue the job with the same overrides, so it would start over; these add ``resume=true`` when
the job's directory holds a checkpoint whose SHA-256 matches its sidecar, so the requeued job
continues from the checkpoint that the runner last wrote there (every
``checkpoint.every_n_steps`` and at each epoch end). A job preempted before its first checkpoint
is requeued with its overrides as they were: it starts over, and the runner moves the records
of the preempted attempt to ``restarts/<n>/`` in the job's directory (resume=true would be
refused there: there is nothing to resume).

Select them with ``hydra/launcher=submitit_slurm_resume`` (all of ``submitit_slurm``'s settings;
set ``hydra.launcher.max_num_timeout=<N>``: how many time-outs may be requeued, preemptions
always are) or ``hydra/launcher=submitit_local_resume`` (one machine; tests). Hydra only loads
launchers from the ``hydra_plugins`` package, hence this module's place. Needs the ``slurm``
extra (``hydra-submitit-launcher``).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

try:
    from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
except ImportError:  # the optional ``slurm`` extra is absent: Hydra scans this module anyway
    SlurmLauncher = LocalLauncher = None  # type: ignore[assignment,misc]

RESUME_OVERRIDE = "resume=true"


def with_resume(overrides: "list[str]") -> "list[str]":
    """``overrides`` with any ``resume=`` replaced by ``resume=true``."""
    return [o for o in overrides if not o.lstrip("+").startswith("resume=")] + [RESUME_OVERRIDE]


def requeue_overrides(overrides: "list[str]", job_dir: "Path | None") -> "list[str]":
    """The requeued job's overrides: `with_resume` when ``job_dir`` holds a verified checkpoint,
    else ``overrides`` unchanged (the job starts over)."""
    from normbench.resume.files import has_verified_checkpoint

    if job_dir is not None and has_verified_checkpoint(job_dir):
        return with_resume(overrides)
    return list(overrides)


def running_job_dir() -> "Path | None":
    """The directory of the job running in this process (the hook runs inside it), or None
    when Hydra has not set the job up yet."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return Path(HydraConfig.get().runtime.output_dir)


class _ResumeOnRequeue:
    def checkpoint(
        self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str, singleton_state: Any
    ) -> Any:
        import submitit

        overrides = requeue_overrides(list(sweep_overrides), running_job_dir())
        return submitit.helpers.DelayedSubmission(self, overrides, job_dir_key, job_num, job_id, singleton_state)


if SlurmLauncher is not None:

    class ResumingSlurmLauncher(_ResumeOnRequeue, SlurmLauncher):
        pass

    class ResumingLocalLauncher(_ResumeOnRequeue, LocalLauncher):
        pass

    @dataclass
    class ResumingSlurmQueueConf(SlurmQueueConf):
        _target_: str = f"{__name__}.ResumingSlurmLauncher"

    @dataclass
    class ResumingLocalQueueConf(LocalQueueConf):
        _target_: str = f"{__name__}.ResumingLocalLauncher"

    ConfigStore.instance().store(group="hydra/launcher", name="submitit_slurm_resume", node=ResumingSlurmQueueConf)
    ConfigStore.instance().store(group="hydra/launcher", name="submitit_local_resume", node=ResumingLocalQueueConf)
