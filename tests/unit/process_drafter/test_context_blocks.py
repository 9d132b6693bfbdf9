"""The DFlash draft engine's blocks (minedraft/process_drafter/draft_engine/context_blocks.py)."""

from __future__ import annotations

from minedraft.process_drafter.draft_engine.context_blocks import ContextBlocks, RequestBlocks

BLOCK = 4


def written(blocks: ContextBlocks, tokens: list[int]) -> RequestBlocks:
    """A request whose context of ``tokens`` was written."""
    request = RequestBlocks(tokens=list(tokens))
    assert blocks.grow(request, len(tokens))
    blocks.register(request, len(tokens))
    return request


def test_a_request_gets_the_blocks_its_length_needs_and_never_block_0():
    blocks = ContextBlocks(num_blocks=4, block_size=BLOCK)
    request = RequestBlocks()
    assert blocks.grow(request, 5) and len(request.blocks) == 2 and 0 not in request.blocks
    assert blocks.grow(request, 8) and len(request.blocks) == 2
    other = RequestBlocks()
    assert not blocks.grow(other, 8) and other.blocks == []  # one block left, none taken
    blocks.release(request)
    assert blocks.grow(other, 12) and len(other.blocks) == 3


def test_full_blocks_are_shared_by_their_token_prefix_after_their_request_left():
    blocks = ContextBlocks(num_blocks=8, block_size=BLOCK)
    first = written(blocks, list(range(10)))  # two full blocks, a partial one
    blocks.release(first)
    second = RequestBlocks()
    assert blocks.share(second, list(range(8))) and second.blocks == first_blocks(first, blocks, 2)
    assert not blocks.share(RequestBlocks(), list(range(10)))  # not whole blocks
    assert not blocks.share(RequestBlocks(), [9, *range(1, 8)])  # another first block: another chain
    assert not blocks.share(RequestBlocks(), list(range(12)))  # the third block was never full


def first_blocks(request: RequestBlocks, blocks: ContextBlocks, n: int) -> list[int]:
    return [blocks._by_hash[h] for h in request.hashes[:n]]


def test_shared_blocks_stay_while_held_and_cached_ones_give_way_to_new_requests():
    blocks = ContextBlocks(num_blocks=4, block_size=BLOCK)  # three usable blocks
    first = written(blocks, list(range(8)))
    held = RequestBlocks()
    assert blocks.share(held, list(range(8)))
    blocks.release(first)
    assert not blocks.grow(RequestBlocks(), 8)  # one free block; the shared two are held
    blocks.release(held)
    big = RequestBlocks()
    assert blocks.grow(big, 12) and len(big.blocks) == 3  # the cached blocks were evicted for it
    assert not blocks.share(RequestBlocks(), list(range(8)))
