"""MineDraft's model-runner logic shared by the CPU and GPU runners: verify now, draft beside the next step.

In a parallel step (``scheduler_output.defer_drafts``) the runner does
everything vLLM's runner does except drafting: the ``drafter.propose`` call is
deferred as a job (``DraftSource.defer``) and answered with placeholders
that never reach the scheduler. At the start of the next step the job is run
beside the target's forward, which verifies the other group;
``take_draft_token_ids`` collects its drafts. The drafter therefore sees
exactly the calls stock speculative decoding makes, in the same order, one
step later: its KV cache catches up on every accepted token before it drafts.
In a fallback step the call drafts now (``DraftSource.draft_now``), as in vLLM,
except in a step the scheduler marks ``drafts_after_output`` (one that computes
prompt tokens; with a drafter that catches up, every one): there the call is
held (``DraftSource.hold``) and drafted in ``take_draft_token_ids``, which
vLLM's engine core calls after it has queued the step's outputs, so a
request's first token never waits for its draft work (the drafts still reach
the scheduler before the next step). Where a request reached the engine core
while the step ran, the engine core takes no drafts (the scheduler's
``skips_held_drafts``) and the next step, which carries the new request's
prefill, starts by skipping the held call (``DraftSource.begin_step``).

Where drafts come from is a draft source (``minedraft/contract.py``), chosen once
when the runner is built from the drafter vLLM built: the in-process drafter
on an execution lane, or the process drafter's engine in a process of its
own. The logic here never asks which.

The contract with the scheduler is typed: every step brings a
``MineDraftSchedulerOutput`` (``defer_drafts``: defer this step's propose;
``draft_only_req_ids``: the requests whose drafts the job run this step must
deliver; ``DraftSource.start`` checks that the job covers every one), and the runner
returns ``MineDraftDraftTokenIds``: the drafts and the requests the source
left without them. The drafter is routed through one proxy, installed once
on the drafter at start-up (``drafter.propose``).

The platform runners (``cpu_model_runner.py``, ``gpu_model_runner.py``) add
only their lane and platform parts, for the in-process source, through three
hooks: ``_make_draft_lane``, ``_before_submit`` (the CPU kernel lock) and
``_on_captured`` (the CUDA lane's capture event); ``SUBMIT_BEFORE_TARGET``
says whether a step's job starts before the target's forward (a CPU thread
must be running first) or after it is enqueued (a CUDA stream: the target's
launch first).
"""

from __future__ import annotations

import functools
import inspect

import torch
from vllm.v1.outputs import DraftTokenIds

from minedraft.config.idle_drafter import catches_up
from minedraft.config.methods import method_of
from minedraft.config.settings import MineDraftSettings
from minedraft.contract import DraftSource, LanePlanError, MineDraftSchedulerOutput, ProposeCall, merge_drafts
from minedraft.log import get_logger
from minedraft.process_drafter.target.proposer import ProcessDrafterProposer
from minedraft.process_drafter.target.process_source import NoDraftSource, ProcessDrafterSource
from minedraft.process_drafter.target.step_context import step_context
from minedraft.rank import tensor_parallel_rank
from minedraft.worker.in_process.draft_catch_up import DraftCatchUp
from minedraft.worker.in_process.draft_job import placeholder_drafts
from minedraft.worker.in_process.draft_probs import DraftProbs
from minedraft.worker.in_process.job_watchdog import JobWatchdog
from minedraft.worker.in_process.lanes import Lane
from minedraft.worker.in_process.in_process_source import InProcessDraftSource
from minedraft.worker.plain_sampling import samples_as_target_alone
from minedraft.worker.step_profile import StepProfiler
from minedraft.worker.suffix_batch import with_batch_view

logger = get_logger(__name__)


class MineDraftRunnerMixin:
    """Mixed in before vLLM's runner class (``class R(MineDraftRunnerMixin, GPUModelRunner)``)."""

    SUBMIT_BEFORE_TARGET = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.settings = MineDraftSettings.of(self.vllm_config)
        profile_path = self.settings.step_profile
        self.step_profiler = StepProfiler(profile_path) if profile_path else None
        self._defer_this_step = False
        self._draft_after_output = False
        # This step's call was held by the source, drafted after its outputs (take_draft_token_ids) or,
        # where the engine core takes no drafts because a request arrived, skipped by the next step.
        self._held_this_step = False
        self._step_depth = 0
        self._undrafted: frozenset[str] = frozenset()  # this step's rows whose drafts go unused (contract.py)
        self._propose_parameters: tuple[str, ...] | None = None  # vLLM's propose_draft_token_ids
        self.draft_catch_up: DraftCatchUp | None = None
        # The n-gram drafter keeps nothing across calls (it reads the token table each time): a depth-0
        # call is not made, and nothing is caught up after it.
        self.stateless_drafter = method_of(self.speculative_config).stateless
        self.draft_probs = self._make_draft_probs()
        self.draft_source = self._make_draft_source()
        self._install_propose_proxy()

    def _make_draft_source(self) -> DraftSource:
        """The one place that tells the sources apart: the front end gives the process drafter's
        target vLLM's ``custom_class`` method with :class:`ProcessDrafterProposer` as its drafter."""
        drafter = getattr(self, "drafter", None)
        if isinstance(drafter, ProcessDrafterProposer):
            if not drafter.drives_engine:  # a tensor-parallel rank other than 0
                return NoDraftSource()
            logger.info("MineDraft draft source: the process drafter")
            return ProcessDrafterSource(drafter)
        lane = self._make_draft_lane()
        logger.info("MineDraft draft lane: %s", type(lane).__name__)
        self.draft_catch_up = self._make_draft_catch_up()
        return InProcessDraftSource(
            drafter.propose if drafter is not None else None, lane, capture_max_mib=self.settings.capture_max_mib,
            before_run=self._before_submit, on_captured=self._on_captured, profiler=self.step_profiler,
            catch_up=self.draft_catch_up, stateless_drafter=self.stateless_drafter,
            watchdog=JobWatchdog(self.settings.lane_timeout_s, f"rank {tensor_parallel_rank()}"),
            draft_probs=self.draft_probs)

    def _make_draft_probs(self) -> DraftProbs | None:
        """Where vLLM's proposer samples its drafts and the rejection sampler reads their probabilities
        (``draft_sample_method: probabilistic``), they are kept per request (``draft_probs.py``)."""
        spec, drafter = self.speculative_config, getattr(self, "drafter", None)
        if (not hasattr(drafter, "take_last_draft_probs") or spec.draft_sample_method != "probabilistic"
                or spec.rejection_sample_method != "standard"):
            return None
        return DraftProbs(drafter.take_last_draft_probs)

    def _make_draft_catch_up(self) -> DraftCatchUp | None:
        """At depth 0 the draft model or EAGLE head skips its forward (``idle_drafter=skip``), as it
        does a held call the engine core took no drafts of (``DraftSource.begin_step``); an EAGLE head's catch-up
        feeds it the target's hidden states its skipped calls kept (up to ``catch_up_max_mib``). Where
        the scheduler counts on one: ``catches_up``."""
        if not catches_up(self.speculative_config, self.settings, self.uses_mrope):
            return None
        # Read at call time: vLLM rebuilds its input batch and sets the block size with the KV cache.
        return DraftCatchUp(
            token_ids=lambda row: self.input_batch.token_ids_cpu[row],
            computed=lambda row: int(self.input_batch.num_computed_tokens_cpu[row]),
            block_size=lambda: self.drafter.block_size,
            max_tokens=self.vllm_config.scheduler_config.max_num_batched_tokens, device=self.device,
            keeps_hidden_states=method_of(self.speculative_config).reads_hidden_states,
            max_hidden_bytes=int(self.settings.catch_up_max_mib * 2**20))

    # -------------------------------------------------------------- platform hooks (in-process source)
    def _make_draft_lane(self) -> Lane:
        raise NotImplementedError

    def _before_submit(self, lane: Lane, job_this_step: bool) -> None:
        """Called at the start of every step, with no job on ``lane``."""

    def _on_captured(self, lane: Lane) -> None:
        """Called right after a deferred ``propose`` was captured (its inputs copied)."""

    # -------------------------------------------------------------- step
    def execute_model(self, scheduler_output, intermediate_tensors=None):
        plan = _lane_plan(scheduler_output)
        self._defer_this_step = plan.defer_drafts
        self._draft_after_output = plan.drafts_after_output
        self._held_this_step = False
        self._step_depth = scheduler_output.num_spec_tokens_to_schedule
        self._undrafted = plan.undrafted_req_ids
        if self.step_profiler is not None:
            self.step_profiler.begin(
                len(scheduler_output.num_scheduled_tokens), len(plan.draft_only_req_ids), plan.defer_drafts
            )
        self.draft_source.begin_step(scheduler_output.finished_req_ids | (scheduler_output.preempted_req_ids or set()))
        execute = functools.partial(super().execute_model, scheduler_output, intermediate_tensors)
        if self.step_profiler is not None:
            execute = functools.partial(self.step_profiler.target, execute)
        if self.SUBMIT_BEFORE_TARGET:
            self.draft_source.start(plan.draft_only_req_ids)
            self._send_prompts(scheduler_output)
            return execute()
        output = execute()
        self.draft_source.start(plan.draft_only_req_ids)
        self._send_prompts(scheduler_output)
        return output

    def _send_prompts(self, scheduler_output) -> None:
        """The prompts whose last chunks this step computes, to a source that drafts from them beside the
        target's forward (after the step's job: the drafter takes them in order). Not a prompt whose drafts
        the step does not want (contract.py's undrafted rows), nor one resumed after preemption (its history
        is more than its prompt: the next job sends it whole)."""
        if not self.draft_source.takes_prompts:
            return
        scheduled = scheduler_output.num_scheduled_tokens
        prompts = {}
        for new in scheduler_output.scheduled_new_reqs:
            tokens = new.prompt_token_ids
            if tokens is not None and new.num_computed_tokens + scheduled.get(new.req_id, 0) >= len(tokens):
                prompts[new.req_id] = tokens
        cached = scheduler_output.scheduled_cached_reqs
        for req_id, computed in zip(cached.req_ids, cached.num_computed_tokens):
            state = self.requests.get(req_id)
            tokens = None if state is None or req_id in cached.resumed_req_ids else state.prompt_token_ids
            if tokens is not None and computed < len(tokens) <= computed + scheduled.get(req_id, 0):
                prompts[req_id] = tokens
        wanted = {req_id: tokens for req_id, tokens in prompts.items() if req_id not in self._undrafted}
        if wanted:
            self.draft_source.prompts(wanted)

    def take_draft_token_ids(self) -> DraftTokenIds | None:
        if self.step_profiler is not None:
            self.step_profiler.main_lane_done()
        # The running job's drafts, and a held call's, drafted now: the engine core has queued this step's outputs.
        drafts = self.draft_source.collect()
        held, self._held_this_step = self._held_this_step, False
        inline = None if self._defer_this_step or held else super().take_draft_token_ids()
        if self.step_profiler is not None:
            self.step_profiler.end()
        return merge_drafts(drafts, inline)

    def _install_propose_proxy(self) -> None:
        """Route the drafter's ``propose`` through :meth:`_propose` (once, at start-up).

        vLLM's runner calls ``self.drafter.propose(...)`` from its sampling
        step; the proxy on this runner's own drafter instance hands the call
        to the draft source, deferred or now as the step's plan says.
        """
        drafter = getattr(self, "drafter", None)
        if drafter is not None:
            drafter.propose = lambda *args, **kwargs: self._propose(args, kwargs)

    def _prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        """A step whose drafter skips (depth 0 with a catch-up) and that verifies no draft is
        prepared as the target alone's: vLLM's spec-decode metadata (zero drafts per request,
        its index arithmetic and copies: ~0.2 ms a step on CPU) would only feed the rejection
        sampler, which such a step skips (``_sample``), and the drafter, which skips it. Hybrid
        models keep it: their recurrent backends read a zero-draft decode at the speculative
        offset (vLLM's ``num_decode_draft_tokens``)."""
        if not self._prepares_as_target_alone(scheduler_output):
            return super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        # vLLM's _prepare_inputs reads speculative_config once, to choose between the two paths.
        speculative_config, self.speculative_config = self.speculative_config, None
        try:
            return super()._prepare_inputs(scheduler_output, num_scheduled_tokens)
        finally:
            self.speculative_config = speculative_config

    def _prepares_as_target_alone(self, scheduler_output) -> bool:
        return ((self.draft_catch_up is not None or self.stateless_drafter) and not self.model_config.is_hybrid
                and scheduler_output.num_spec_tokens_to_schedule == 0
                and not scheduler_output.scheduled_spec_decode_tokens)

    # -------------------------------------------------------------- the target's hidden states a source takes
    def _setup_eagle3_aux_hidden_state_outputs(self) -> None:
        """A source that takes the target's hidden states every step (``DraftSource.context_layers``: a
        DFlash draft in its own process) gets them as vLLM's DFlash drafter does: the target model returns
        them at those layers (called once the drafter, and so the process drafter's engine, is loaded)."""
        if self.draft_source.context_layers is not None:
            self.use_aux_hidden_state_outputs = True
        super()._setup_eagle3_aux_hidden_state_outputs()

    def _get_eagle3_aux_layers_from_config(self):
        layers = self.draft_source.context_layers
        return layers if layers is not None else super()._get_eagle3_aux_layers_from_config()

    def _step_arguments(self, scheduler_output, args: tuple, kwargs: dict) -> dict:
        """vLLM's ``propose_draft_token_ids`` arguments by name (the names read once: binding them
        through ``inspect`` each step cost about 1 % of the kit's 2 ms steps)."""
        if self._propose_parameters is None:
            self._propose_parameters = tuple(inspect.signature(super().propose_draft_token_ids).parameters)
        return {**dict(zip(self._propose_parameters, (scheduler_output, *args))), **kwargs}

    def _input_fits_in_drafter(self, common_attn_metadata) -> bool:
        """vLLM skips a step's drafter call when one request is within k of the model length; a source
        that takes every step's hidden states still needs the step's rows (the process drafter's DFlash
        draft drafts no row past the length)."""
        if self.draft_source.context_layers is not None:
            return common_attn_metadata is not None
        return super()._input_fits_in_drafter(common_attn_metadata)

    def _add_step_context(self, scheduler_output, args: tuple, kwargs: dict) -> None:
        """Every step's context rows go to the source, whatever the step's depth or plan: its hidden
        states exist only now (``step_context.py``)."""
        step = self._step_arguments(scheduler_output, args, kwargs)
        self.draft_source.add_context(*step_context(list(self.input_batch.req_ids), scheduler_output,
                                                    step["sampled_token_ids"], step["aux_hidden_states"],
                                                    self.input_batch.token_ids_cpu))

    def propose_draft_token_ids(self, scheduler_output, *args, **kwargs):
        """At depth 0 with a catch-up, vLLM's preparation of the drafter's inputs (next tokens,
        padded metadata, positions: 0.5-1 ms a step on CPU) is skipped with the forward it
        prepares; the step is recorded as skipped (``_propose`` with the step's depth, 0). Its
        outputs are only needed with async scheduling, which MineDraft turns off. The n-gram
        drafter is not called at depth 0 at all (nothing to catch up). An EAGLE head's
        skipped call keeps only what its catch-up reads: the target's hidden states of the step's
        tokens and where each request's tokens start (``_skip_kwargs``)."""
        if self.draft_source.context_layers is not None:
            self._add_step_context(scheduler_output, args, kwargs)
        catch_up = self.draft_catch_up
        if scheduler_output.num_spec_tokens_to_schedule == 0:
            if self.stateless_drafter or (catch_up is not None and not catch_up.keeps_hidden_states):
                # Nothing of this step to keep: the n-gram drafter reads the token table at its next call
                # (vLLM's would scan every request's tokens here, for no drafts), a draft model's catch-up
                # the committed tokens. The call still goes to the draft source, which answers it empty.
                return self._propose((), {})
            if catch_up is not None:
                kept = self._skip_kwargs(scheduler_output, args, kwargs)
                if kept is not None and catch_up.can_skip(kept):
                    return self._propose((), kept)
        return super().propose_draft_token_ids(scheduler_output, *args, **kwargs)

    def _skip_kwargs(self, scheduler_output, args: tuple, kwargs: dict) -> dict | None:
        """A depth-0 EAGLE call's keyword arguments cut to what a skip keeps, for a step that verified
        no drafts: the target's hidden states as vLLM's runner selects them there (the first
        ``total_num_scheduled_tokens`` rows; EAGLE-3's auxiliary layers as a tuple) and the
        attention metadata. None where vLLM selects otherwise (drafts were verified; a model that
        overrides the hidden states)."""
        step = self._step_arguments(scheduler_output, args, kwargs)
        if step["spec_decode_metadata"] is not None or hasattr(self.get_model(), "get_mtp_target_hidden_states"):
            return None
        n = scheduler_output.total_num_scheduled_tokens
        if self.use_aux_hidden_state_outputs:  # joined only where kept (draft_catch_up.py)
            hidden = tuple(h[:n] for h in step["aux_hidden_states"])
        else:
            hidden = step["hidden_states"][:n]
        return {"target_hidden_states": hidden, "common_attn_metadata": step["common_attn_metadata"]}

    def _sample(self, logits, spec_decode_metadata):
        """A step without drafts samples as the target alone does (``plain_sampling.py``)."""
        if samples_as_target_alone(spec_decode_metadata, self.input_batch.sampling_metadata):
            spec_decode_metadata = None
        return super()._sample(logits, spec_decode_metadata)

    def _get_spec_decode_draft_probs(self, spec_decode_metadata):
        """The verified drafts' probabilities, kept per request (vLLM keeps its last call's: a deferred
        call's drafts are verified in a later step, beside other calls)."""
        if self.draft_probs is None:
            return super()._get_spec_decode_draft_probs(spec_decode_metadata)
        return self.draft_probs.for_verification(self.input_batch.req_ids, spec_decode_metadata.num_draft_tokens,
                                                 spec_decode_metadata.draft_token_ids)

    def _propose(self, args: tuple, kwargs: dict):
        if method_of(self.speculative_config).reads_batch:  # suffix decoding (suffix_batch.py)
            args, kwargs = with_batch_view(args, kwargs, self.input_batch, self.requests.keys())
        call = ProposeCall(list(self.input_batch.req_ids), args, kwargs, self._step_depth, self._undrafted)
        if self._defer_this_step:
            self.draft_source.defer(call)
        elif self._draft_after_output:
            self.draft_source.hold(call)
            self._held_this_step = True
        else:
            return self.draft_source.draft_now(call)
        num_reqs = self.input_batch.num_reqs
        if method_of(self.speculative_config).drafts_as_lists:
            return [[] for _ in range(num_reqs)]
        return placeholder_drafts(num_reqs, self.speculative_config.num_speculative_tokens, self.device)


def _lane_plan(scheduler_output) -> MineDraftSchedulerOutput:
    """The step's lane plan. Only an empty step (vLLM's dummy and idle paths) may
    come without one; anything else means MineDraft's scheduler is not the one
    scheduling for this worker."""
    if isinstance(scheduler_output, MineDraftSchedulerOutput):
        return scheduler_output
    if scheduler_output.total_num_scheduled_tokens == 0:
        return MineDraftSchedulerOutput.extend(scheduler_output, [], False)
    raise LanePlanError(
        f"minedraft: the worker got a {type(scheduler_output).__name__} without MineDraft's lane plan; "
        "MineDraft's worker needs MineDraft's scheduler (--scheduler-cls minedraft)."
    )
