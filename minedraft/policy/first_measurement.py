"""A new request's first drafts: measured where what they could gain outweighs what they could lose.

A request's drafts pay by its own acceptance, which nothing tells before its first drafts are verified;
until then it stands at the finished requests' mean rate (acceptance.py). Where that mean lies between
texts the draft predicts well and texts it misses (code and prose) it can pay for no depth, and a request
that would pay is never measured (on the real pair, a request of code after a batch half of prose ran every
step at depth 0, where before that batch it drafted at 1.24x the target alone).

So measuring is weighed, once per request, in the first step it decodes in. Of the finished requests, those
whose position-1 rate was above their mean are the ``share`` a new request may be like, at their mean rate
(``Acceptance.upper``). Taken at that rate, the new requests would have the step run at the depth best for
them; where that beats the depth chosen without them by ``margin``, measuring them first

* gains, if they are like those requests, the seconds saved over the tokens the batch has left;
* loses, if they are not, ``prior_trials`` steps at that depth for nothing.

They are measured first where chance x gain > (1 - chance) x loss, the chance being the share; where the
batch is closed (no request waits: it ends with its last one, depth.py), the share to the power of the new
requests, for the gain comes only where every one of them drafts well. Measured first, their first
``prior_trials`` verified steps stand at the upper rate; their own acceptance takes over from there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from minedraft.policy.depth import DepthChoice
from minedraft.policy.plan import RequestView


def decide_first_measurements(choice: DepthChoice, requests: Sequence[RequestView], limits: Sequence[int],
                              catch_up: int, tokens_left: float, closing: Sequence[int] | None) -> int:
    """Decide, for the decoding ``requests`` with nothing decided yet, whether they are measured first (see the
    module); ``limits``: each request's drafts at most. How many were."""
    acceptance = choice.acceptance
    new = [i for i, r in enumerate(requests) if r.decoding and acceptance.undecided(r.req_id)]
    if not new or not choice.costs.known:
        return 0  # decided once the step costs are known (its first steps draft at the start depth anyway)
    upper, first = acceptance.upper, None
    if upper is not None:
        as_mean = [acceptance.survivals(r.req_id, n) for r, n in zip(requests, limits)]
        as_upper = list(as_mean)
        for i in new:
            as_upper[i] = acceptance.survivals(requests[i].req_id, limits[i], first=upper[1])
        plain = choice.goodput(len(requests), tokens_left, catch_up, survivals=as_mean, closing=closing)
        hopeful = choice.goodput(len(requests), tokens_left, catch_up, survivals=as_upper, closing=closing)
        left = [r.tokens_left for r in requests]
        tokens = max(left) * len(requests) if closing is not None else sum(left)
        chance = upper[0] ** len(new) if closing is not None else upper[0]
        if pays(choice, len(requests), plain, hopeful, tokens, chance, math.ceil(choice.tuning.prior_trials)):
            first = upper[1]
    acceptance.decide([requests[i].req_id for i in new], first)
    return len(new) if first is not None else 0


def pays(choice: DepthChoice, num_reqs: int, plain: Sequence[float], hopeful: Sequence[float],
         tokens: float, chance: float, steps: int) -> bool:
    """Whether measuring first pays in steps of ``num_reqs`` requests: ``plain`` and ``hopeful``, the goodput
    at each depth without it and with the new requests at the upper rate; ``tokens`` the batch has left;
    ``chance``: that they are like the finished requests above the mean."""
    depth, hopeful_depth = choice.best_depth(plain), choice.best_depth(hopeful)
    if hopeful_depth == 0 or plain[depth] <= 0 or hopeful[hopeful_depth] <= plain[depth] * (1 + choice.tuning.margin):
        return False
    gain = tokens * (1 / plain[depth] - 1 / hopeful[hopeful_depth])
    seconds = choice.costs.seconds(num_reqs, choice.max_depth)
    loss = steps * max(seconds[hopeful_depth] - seconds[depth], 0.0)
    return chance * gain > (1 - chance) * loss
