"""MineDraft's benchmarks, each a module run from the checkout's root: ``python -m benchmarks.sweep``."""
