"""The DFlash draft engine's KV blocks: allocated per request, full blocks shared by their token prefix.

The target's prefix cache skips the tokens of a prompt prefix it has seen: it
computes no hidden states for them, and a DFlash draft in the target's worker
finds their context K/V in the same cached blocks (its layers share the
target's block table). The draft engine in its own process keeps a prefix
cache of its own for the same reason: every full block of a request's context
is registered under the hash of its tokens and of the blocks before it, as
vLLM's prefix cache does, and stays after its request is released until its
space is needed. A request whose context starts after a cached prefix
(``share``) gets those blocks, read-only: its own context starts at the next
block.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class RequestBlocks:
    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # of its first len(hashes) blocks, all full
    tokens: list[int] = field(default_factory=list)  # its context's tokens, for the hashes


class ContextBlocks:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        # Block 0 is vLLM's null block.
        self._free = list(range(num_blocks - 1, 0, -1))
        self._cached: OrderedDict[int, int] = OrderedDict()  # hash -> block no request holds, oldest first
        self._by_hash: dict[int, int] = {}
        self._hash_of: dict[int, int] = {}
        self._refs: dict[int, int] = {}

    def grow(self, request: RequestBlocks, length: int) -> bool:
        """Blocks for the first ``length`` positions; False (and none taken) if they ran out."""
        need = -(-length // self.block_size) - len(request.blocks)
        if need > len(self._free) + len(self._cached):
            return False
        for _ in range(max(0, need)):
            block = self._free.pop() if self._free else self._evict()
            self._refs[block] = 1
            request.blocks.append(block)
        return True

    def share(self, request: RequestBlocks, prefix: Sequence[int]) -> bool:
        """Start an empty ``request`` on the cached blocks of ``prefix`` (whole blocks); False if some
        block of it is not cached."""
        if len(prefix) % self.block_size:
            return False
        hashes = _chain(None, prefix, self.block_size)
        if not all(h in self._by_hash for h in hashes):
            return False
        for h in hashes:
            block = self._by_hash[h]
            self._cached.pop(h, None)
            self._refs[block] = self._refs.get(block, 0) + 1
            request.blocks.append(block)
        request.hashes, request.tokens = hashes, list(prefix)
        return True

    def register(self, request: RequestBlocks, length: int) -> None:
        """The request's context is written up to ``length``: its full blocks become shareable."""
        full = min(length, len(request.tokens)) // self.block_size
        while len(request.hashes) < full:
            i = len(request.hashes)
            parent = request.hashes[-1] if request.hashes else None
            (h,) = _chain(parent, request.tokens[i * self.block_size:(i + 1) * self.block_size], self.block_size)
            request.hashes.append(h)
            block = request.blocks[i]
            if h not in self._by_hash and block not in self._hash_of:
                self._by_hash[h], self._hash_of[block] = block, h

    def release(self, request: RequestBlocks) -> None:
        for block in request.blocks:
            self._refs[block] -= 1
            if self._refs[block]:
                continue
            del self._refs[block]
            if block in self._hash_of:
                self._cached[self._hash_of[block]] = block
            else:
                self._free.append(block)
        request.blocks = []

    def _evict(self) -> int:
        h, block = self._cached.popitem(last=False)
        del self._by_hash[h], self._hash_of[block]
        return block


def _chain(parent: int | None, tokens: Sequence[int], block_size: int) -> list[int]:
    hashes = []
    for i in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[i:i + block_size])))
        hashes.append(parent)
    return hashes
