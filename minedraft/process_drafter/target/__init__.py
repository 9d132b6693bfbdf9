"""The process drafter in the target's worker: the proposer vLLM calls, and the client of the draft engine."""
