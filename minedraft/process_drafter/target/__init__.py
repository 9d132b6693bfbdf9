"""The process drafter in the target's worker: the proposer vLLM calls, the draft source MineDraft's runner
uses (``process_source.py``), each step's DFlash context (``step_context.py``, ``context_queue.py``) and the client of the
draft engine."""
