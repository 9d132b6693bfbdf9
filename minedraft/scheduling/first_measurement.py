"""A new request's first drafts: measured where what they could gain outweighs what they could lose.

A request's drafts pay by its own acceptance (scheduling/request_depths.py), which nothing tells before its
first drafts are verified; until then it stands at the finished requests' mean rate. Where that mean lies
between texts the draft predicts well and texts it misses (code and prose), it can pay for no depth,
and a request that would pay is never measured: on the real pair at N = 1 on a 2-core Xeon, a request of
code after a batch half of prose ran every step at depth 0, where before that batch it drafted at depth 3
at 1.24x the target alone.

So measuring is weighed, once per request, in the first step it decodes in (its prompt computed: by then a
burst's requests have all arrived, where its first request, arrived alone, would be weighed as a batch of
one). Of the finished requests, the recent ones counting most, those whose position-1 rate was above their
mean are the ``share`` a new request may be like, at their mean rate (``RequestDepths.upper``). Taken at
that rate, the new requests would have the step run at the depth best for them: where that beats the depth
chosen without them by the controller's margin, measuring them first

* gains, if they are like those requests, the seconds saved over the tokens the batch has left (at the
  chosen depth's tokens per second, then at the better one's);
* loses, if they are not, ``prior_trials`` steps at that depth for nothing: the seconds those steps cost
  over the chosen depth's (their own tokens not counted).

They are measured first where chance x gain > (1 - chance) x loss, the chance being the share; where no
request waits and the batch ends with its last one (depth_controller.py), the share to the power of the new
requests, for the gain comes only where every one of them drafts well: a closed batch of code and prose is
measured first only where one or two requests are new. Measured first, their first ``prior_trials`` verified
steps stand at the upper rate, not the mean, and their own acceptance takes over from there. A run of prose
lowers the share and the upper rate both; a load where no depth pays at any rate (a large compute-bound
batch) measures nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from minedraft.scheduling.depth_controller import DepthController
from minedraft.scheduling.request_depths import RequestDepths


def decide_first_measurements(controller: DepthController, depths: RequestDepths, requests: Sequence[Any],
                              decodes: int, limits: Sequence[int], batch_rates: Sequence[float | None],
                              catch_up: int, remaining: float, left: Sequence[int],
                              finishing: Sequence[int] | None) -> int:
    """Decide, for the ``requests`` whose depth is being chosen (the first ``decodes`` of them decoding, the
    rest starting) and who decode with nothing decided yet, whether they are measured first (see the module);
    ``limits``: each request's drafts at most, ``left``: its tokens left. How many were."""
    new = [i for i, r in enumerate(requests[:decodes]) if depths.undecided(r.request_id)]
    if not new or not controller.costs.known:
        return 0  # decided once the step costs are known (its first steps draft at the start depth anyway)
    upper, first = depths.upper, None
    if upper is not None:
        as_mean = [depths.survivals(r.request_id, n, batch_rates) for r, n in zip(requests, limits)]
        as_upper = list(as_mean)
        for i in new:
            as_upper[i] = depths.survivals(requests[i].request_id, limits[i], batch_rates, first=upper[1])
        args = (len(requests), catch_up, remaining)
        plain = controller.goodput(*args, survivals=as_mean, finishing=finishing)
        hopeful = controller.goodput(*args, survivals=as_upper, finishing=finishing)
        tokens = max(left) * len(requests) if finishing is not None else sum(left)
        chance = upper[0] ** len(new) if finishing is not None else upper[0]
        if pays(controller, len(requests), plain, hopeful, tokens, chance, math.ceil(depths.prior_trials)):
            first = upper[1]
    depths.decide([requests[i].request_id for i in new], first)
    return len(new) if first is not None else 0


def pays(controller: DepthController, decodes: int, plain: Sequence[float], hopeful: Sequence[float],
         tokens: float, chance: float, steps: int) -> bool:
    """Whether measuring first pays in steps of ``decodes`` requests: ``plain`` and ``hopeful``, the goodput
    at each depth without it and with the new requests at the upper rate; ``tokens`` the batch has left;
    ``chance``: that they are like the finished requests above the mean (see the module)."""
    depth, probe = controller.best_depth(plain), controller.best_depth(hopeful)
    if probe == 0 or plain[depth] <= 0 or hopeful[probe] <= plain[depth] * (1 + controller.margin):
        return False
    gain = tokens * (1 / plain[depth] - 1 / hopeful[probe])
    seconds = controller.costs.seconds(decodes, controller.max_depth)
    loss = steps * max(seconds[probe] - seconds[depth], 0.0)
    return chance * gain > (1 - chance) * loss
