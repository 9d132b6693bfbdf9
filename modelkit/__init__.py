"""The model kit: a tiny target, two drafts and an EAGLE-3 head, built offline on first use.

>>> kit = build_kit()          # a few minutes the first time, milliseconds after
>>> kit.target, kit.draft_perturbed, kit.draft_small, kit.eagle3, kit.tokenizer

The target and drafts are float32 ``LlamaForCausalLM`` directories with a shared
2048-token BPE tokenizer, loadable by vLLM (``method="draft_model"``) and
transformers; ``eagle3`` is an EAGLE-3 checkpoint for the target
(``method="eagle3"``, ``eagle3.py``).
Importing this package does not import torch.
"""

from modelkit.build import Kit, build_kit

__all__ = ["Kit", "build_kit"]
