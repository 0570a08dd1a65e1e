"""Hydra submitit launchers whose requeued jobs resume from their last checkpoint.

When SLURM preempts a job or its time runs out, submitit signals it (``USR2``) and calls the
launcher's ``checkpoint`` hook, which returns the submission to requeue. Hydra's own launchers
requeue the job with the same overrides, so it would start over; these add ``resume=true``, so
the requeued job continues from the checkpoint that the runner last wrote in the same job
directory (every ``checkpoint.every_n_steps`` and at each epoch end).

Select them with ``hydra/launcher=submitit_slurm_resume`` (all of ``submitit_slurm``'s settings;
set ``hydra.launcher.max_num_timeout=<N>``: how many time-outs may be requeued, preemptions
always are) or ``hydra/launcher=submitit_local_resume`` (one machine; tests). Hydra only loads
launchers from the ``hydra_plugins`` package, hence this module's place. Needs the ``slurm``
extra (``hydra-submitit-launcher``).
"""


from dataclasses import dataclass
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


class _ResumeOnRequeue:
    def checkpoint(
        self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str, singleton_state: Any
    ) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(
            self, with_resume(list(sweep_overrides)), job_dir_key, job_num, job_id, singleton_state
        )


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
