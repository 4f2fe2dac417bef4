"""Bytes in and out, and nothing else: the bottom wing (standard library only).

* :mod:`.read`: the files a user names, read with a size limit (a FIFO or a device is never opened);
* :mod:`.written`: the record of the files mhlo-cost wrote, behind the one ``-o`` rule;
* :mod:`.outtext`: text other programs read: strict JSON, CSV cells a spreadsheet cannot evaluate.
"""
