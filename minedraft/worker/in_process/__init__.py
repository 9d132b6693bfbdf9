"""The in-process drafter: vLLM's proposer in this worker, its deferred calls replayed on an execution lane,
its depth-0 calls skipped and caught up, its draft probabilities kept, each job bounded in time."""
