"""The process drafter's own process: vLLM's engine of the draft model, answering draft jobs."""
