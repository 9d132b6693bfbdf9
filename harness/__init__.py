"""How the demo, the tests and the benchmarks start vLLM engines and servers.

* ``engine_args``: the engine arguments of each mode (no SD, stock SD, MineDraft
  parallel / auto), built in one place, offline or as ``serve`` flags;
* ``child``: an engine in a child process, answering JSON commands (the one
  child-process protocol);
* ``server``: a ``minedraft serve`` server on 127.0.0.1, started and stopped
  as a process group.
"""
