"""When CPython's cyclic garbage collector may pause a process that generates or serves load.

By default a collection of the youngest generation runs whenever 700 more container objects
have been allocated than freed, every tenth of those also collects the middle one, and so on.
Each collection walks every object of its generations, and holds the whole process meanwhile.
A client keeping 1000 streams open (and the simulator serving them) keeps tens of thousands of
objects alive per level and frees old ones all the time, so the count runs up fast. At 1000
streams the client paused 2-11 ms (youngest), 15-24 ms (middle) and 15-35 ms (all) several
times a second, the simulator up to 30, 29 and 42 ms. A pause of P ms on an event loop that is
busy most of the time delays what queues behind it by about 2-3 P; and a stream that receives
two tokens before it is read has them merged by the kernel under the later one's timestamp.

Yet there is almost nothing for the collector to find: in-flight objects are freed by reference
counting. Full collections every 5 s during a 1000-user level found 0 objects in the client;
the simulator left fewer than one per request. So what is alive once start-up is over is frozen
out of the collector's view (`gc.freeze()`: it lives as long as the process), and collections run
only when `COLLECT_AFTER` more containers are alive than at the last one: cyclic garbage is still
collected, in rare pauses instead of frequent ones.
"""

from __future__ import annotations

import gc

COLLECT_AFTER = 100_000


def quiet_collector() -> None:
    """Freeze what is alive now, and collect only after `COLLECT_AFTER` more containers."""
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(COLLECT_AFTER, middle, old)
