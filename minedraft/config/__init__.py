"""MineDraft's configuration, the bottom layer of the package (imports no other part of it).

* ``settings.py``: :class:`MineDraftSettings`, parsed once in the front end and
  carried to every process inside vLLM's config;
* ``environment.py``: every ``MINEDRAFT_*`` variable in one table, and the only reader;
* ``drafter_device.py``: the process drafter's device (``cpu:<cores>``, ``cuda:<indices>``);
* ``validation.py``: what MineDraft can run, checked before any model loads;
* ``modes.py``: the runtime's modes and draft-lane placements;
* ``errors.py``: :class:`MineDraftConfigError`, one line each.
"""

from minedraft.config.errors import MineDraftConfigError
from minedraft.config.settings import MineDraftSettings

__all__ = ["MineDraftConfigError", "MineDraftSettings"]
