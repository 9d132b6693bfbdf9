"""The one place that names MineDraft's classes and keys for vLLM's string-typed knobs.

Imports nothing: the config layer and the front end use these names without
loading the classes (each of them imports vLLM).
"""

SHORT_NAME = "minedraft"

SCHEDULER_QUALNAME = "minedraft.scheduling.scheduler.MineDraftScheduler"
CPU_WORKER_QUALNAME = "minedraft.worker.cpu_worker.MineDraftCPUWorker"
GPU_WORKER_QUALNAME = "minedraft.worker.gpu_worker.MineDraftGPUWorker"
# The process drafter (minedraft/process_drafter/): the target's proposer, given to vLLM as a
# ``custom_class`` speculative method, and the draft engine's scheduler.
PROPOSER_QUALNAME = "minedraft.process_drafter.target.proposer.ProcessDrafterProposer"
DRAFT_SCHEDULER_QUALNAME = "minedraft.process_drafter.draft_engine.session_scheduler.DraftSessionScheduler"
# additional_config key of the draft engine's arguments (front end -> target worker).
DRAFT_ENGINE_KEY = "minedraft_draft_engine"


def is_minedraft(scheduler_cls: object) -> bool:
    """True when a ``scheduler_cls`` value selects MineDraft (short or full name, or the class
    or a subclass of it, recognised by name so that nothing is imported here)."""
    if isinstance(scheduler_cls, str):
        return scheduler_cls in (SHORT_NAME, SCHEDULER_QUALNAME)
    if isinstance(scheduler_cls, type):
        return any(f"{c.__module__}.{c.__qualname__}" == SCHEDULER_QUALNAME for c in scheduler_cls.__mro__)
    return False


def resolve_short_name(scheduler_cls: object) -> object:
    """Map the short name to the full qualified name; leave anything else as is."""
    return SCHEDULER_QUALNAME if scheduler_cls == SHORT_NAME else scheduler_cls
