"""MineDraft: batch-parallel speculative decoding for vLLM V1.

Importing the package does nothing but define ``__version__``: it imports no
vLLM, checks no versions, applies no patches and writes nothing, so its
pure-Python parts (the simulator, the kit) import anywhere. The vLLM release
is checked where MineDraft touches vLLM: the plugin entry point
(``minedraft.plugin.register``) and MineDraft's scheduler and worker modules.
"""

from minedraft._version import __version__

__all__ = ["__version__"]
