"""The model kit: a tiny target and two drafts, built offline on first use.

>>> kit = build_kit()          # ~1-2 min the first time, milliseconds after
>>> kit.target, kit.draft_perturbed, kit.draft_small, kit.tokenizer

All three are float32 ``LlamaForCausalLM`` directories with a shared 2048-token
BPE tokenizer, loadable by vLLM (``method="draft_model"``) and transformers.
Importing this package does not import torch.
"""

from minedraft.kit.build import Kit, build_kit

__all__ = ["Kit", "build_kit"]
