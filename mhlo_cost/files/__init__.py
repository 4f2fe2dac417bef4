"""Bytes in and out, and the collector's pause: the bottom wing (standard library only).

* :mod:`.read`: the files a user names, read with a size limit (a FIFO or a device is never opened);
* :mod:`.write`: the one writer of every file a command writes (atomic replace), behind the one output rule;
* :mod:`.written`: the ledger of the files mhlo-cost wrote (their hashes), which the rule reads;
* :mod:`.outtext`: text other programs read: strict JSON, CSV cells a spreadsheet cannot evaluate;
* :mod:`.console`: what one run says on stderr (its lines, each once; progress where a person watches);
* :mod:`.collector`: CPython's cyclic garbage collector paused over a phase that makes objects and keeps them (the
  one pause every wing uses: the walk, a decode, a render, a first import, a sweep point).
"""
