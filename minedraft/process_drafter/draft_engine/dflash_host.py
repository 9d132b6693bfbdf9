"""The target model as a DFlash draft's engine needs it: its embeddings and LM head, no layers.

A DFlash draft shares the target's token embeddings (for the bonus and mask
tokens it queries with) and LM head (for its drafts). In the drafter's
process vLLM builds its DFlash proposer beside a target model, as it does in
the target's worker; this class stands in for that model. Its engine
allocates KV cache for the draft's layers only, and its forward and logits,
which vLLM computes only to warm up and profile, come from the embeddings.

Registered under :data:`ARCHITECTURE` in the drafter's process only
(``dflash_engine.py``), by class: vLLM inspects a model given by name in a
subprocess that would not have it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.interfaces import SupportsEagle3

ARCHITECTURE = "MineDraftDFlashTargetHead"


class _Embeddings(nn.Module):
    def __init__(self, config, prefix: str) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size,
                                                   prefix=f"{prefix}.embed_tokens")


class DFlashTargetHead(nn.Module, SupportsEagle3):
    """``model.embed_tokens`` and ``lm_head`` of the target's checkpoint (tied or not)."""

    def __init__(self, *, vllm_config, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.model = _Embeddings(config, "model")
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, prefix="lm_head")
        if getattr(config, "tie_word_embeddings", False):
            self.lm_head = self.lm_head.tie_weights(self.model.embed_tokens)
        self.logits_processor = LogitsProcessor(config.vocab_size)
        self._aux_layers: tuple[int, ...] = ()

    # vLLM's runner sets the auxiliary layers of a DFlash target; the warm-up's forward returns as many.
    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self._aux_layers = tuple(layers)

    def get_eagle3_default_aux_hidden_state_layers(self) -> tuple[int, ...]:
        return ()

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None, **_):
        hidden = self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
        return (hidden, [hidden] * len(self._aux_layers)) if self._aux_layers else hidden

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        # Only vLLM's warm-up samples from it (a GPU worker's dummy sampler run): no request is scheduled.
        return self.logits_processor(self.lm_head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded = set()
        for name, weight in weights:
            if name in params:
                getattr(params[name], "weight_loader", default_weight_loader)(params[name], weight)
                loaded.add(name)
        return loaded
