"""The process drafter: the draft model as vLLM's own engine, in a process and on hardware of its own.

Selected with ``MINEDRAFT_DRAFTER=process`` and ``MINEDRAFT_DRAFTER_DEVICE``
(``cpu:<cores>`` or ``cuda:<indices>``). The files are grouped by the process
they run in; a draft job's path:

* the front end: ``frontend.py`` (called from ``engine_arguments.py``) keeps the user's
  ``--speculative-config`` but hands the target engine vLLM's ``custom_class``
  method with :class:`~minedraft.process_drafter.target.proposer.ProcessDrafterProposer`:
  the target's worker loads no draft model and allocates no KV cache for it;
* the target's worker, ``target/``: ``proposer.py`` turns each ``propose`` into a
  job holding only the tokens each request gained since its last job, sends it
  and applies the reply (resyncs, statistics); ``client.py`` starts the draft
  engine process, sends jobs and collects drafts with a bound (a late or dead
  drafter means verifying without drafts);
* the drafter's process, ``draft_engine/``: ``engine.py`` keeps the token
  histories and drafts k tokens per request greedily with vLLM's ``LLM``;
  ``sessions.py`` keeps each request's draft KV from job to job (one
  streaming-input session per request), and ``session_scheduler.py`` rolls a
  session back to the tokens the target accepted;
* both sides: ``protocol.py``, the JSON-lines child protocol the client and the
  engine speak (the project's tooling, ``harness/child.py``, uses it too), and
  ``history.py``, the token histories each side keeps;
* ``placement.py`` (minedraft/config/): ``cpu:``/``cuda:`` device strings and the process's binding.

A DFlash draft's context is the target's hidden states, not tokens:

* ``target/step_context.py`` copies out each step's rows that
  became context; ``target/context_queue.py`` keeps them until the next job, and
  ``context_channel.py`` (both sides) carries them through shared memory;
* ``draft_engine/dflash_engine.py`` runs vLLM's DFlash proposer beside
  ``draft_engine/dflash_host.py`` (the target's embeddings and LM head), its KV in
  ``draft_engine/context_blocks.py`` (per request, full blocks shared by token prefix).

In the target's worker the process drafter is a draft source
(``target/process_source.py``) behind the same interface as the
in-process drafter, so MineDraft's usual two-batch pipeline
(scheduling/scheduler.py, worker/runner_mixin.py) runs unchanged: in a
parallel step the job of the group verified last step is sent when the step
starts and collected when it ends; the requests it left without drafts reach
the scheduler as ``late_req_ids`` (minedraft:late_drafts).
"""
