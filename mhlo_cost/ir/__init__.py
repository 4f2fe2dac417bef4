"""The program as read: a file's bytes to a jaxlib ``ir.Module``, and the facts of its tensor types.

* :mod:`.loader`: text, bytecode, gzip and ``jax.export`` artifacts (:mod:`.formats`), every failure one line;
* :mod:`.guard`: jaxlib's parser (:mod:`.reader`) run in a child process, so that a crash, a hang or a memory
  bomb in it ends the child, never the caller; the child's loop is the package's second front door
  (:mod:`mhlo_cost.cli.child`);
* :mod:`.bindings`: the StableHLO, MHLO, CHLO and Shardy dialects' bindings; :mod:`.types`, :mod:`.tensorinfo`:
  tensor types as Python facts (shape, element type, exact bytes).
"""
