"""The one signature cache: everything a call may reuse, by the signature it serves.

A call's *signature* is all that decides how it runs besides the data: its arguments' types,
shapes, strides, dtypes, devices and alignment, its options, the backend and the forced
launch settings. Whatever was prepared for a signature is kept here under a key that holds
it, and reused by every later call with that signature:

* a public op call's replay (``_fast``), keyed by its arguments as the user passed them;
* a runner (a Triton launch plan, a table or row plan, the CPU loop on a fixed layout, a row
  loop's version timer), keyed by the tensors it runs on, for checked calls, calls from a
  compiled graph and fused backward scans.

A replay holds the runner its first call made, so both find the same object. Keys are
tuples whose first entry says which of these they are; no two kinds can collide. The
cache is emptied when full: a training loop uses a handful of signatures, and a process that
sweeps shapes should not keep every plan it ever made.
"""
from __future__ import annotations

#: the most signatures kept; the cache is emptied when a new one would pass it
MAX_ENTRIES = 4096


class SignatureCache(dict):
    """A dict that empties itself when a new key would pass :data:`MAX_ENTRIES`."""

    def keep(self, key, value):
        """``self[key] = value`` (emptying the cache first when it is full); returns ``value``."""
        if len(self) >= MAX_ENTRIES:
            self.clear()
        self[key] = value
        return value


CACHE = SignatureCache()


def clear() -> None:
    """Forget every signature: the next call of each is checked and planned again."""
    CACHE.clear()
