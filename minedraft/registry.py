"""The one place that names MineDraft's classes for vLLM's string-typed knobs."""

SHORT_NAME = "minedraft"

SCHEDULER_QUALNAME = "minedraft.core.scheduler.MineDraftScheduler"
CPU_WORKER_QUALNAME = "minedraft.worker.cpu_worker.MineDraftCPUWorker"
GPU_WORKER_QUALNAME = "minedraft.worker.gpu_worker.MineDraftGPUWorker"


def is_minedraft(scheduler_cls: object) -> bool:
    """True when a ``scheduler_cls`` value selects MineDraft (short or full name)."""
    if isinstance(scheduler_cls, str):
        return scheduler_cls in (SHORT_NAME, SCHEDULER_QUALNAME)
    if isinstance(scheduler_cls, type):
        from minedraft.core.scheduler import MineDraftScheduler

        return issubclass(scheduler_cls, MineDraftScheduler)
    return False


def resolve_short_name(scheduler_cls: object) -> object:
    """Map the short name to the full qualified name; leave anything else as is."""
    return SCHEDULER_QUALNAME if scheduler_cls == SHORT_NAME else scheduler_cls
