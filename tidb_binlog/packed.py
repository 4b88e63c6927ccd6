"""Batches between the pipeline's actors as one pickled ``bytes`` each.

Ray serialises a call argument or a return value object by object (msgpack, with
cloudpickle for everything msgpack cannot hold); for a batch of a thousand
``(commit_ts, payload)`` tuples or routed row changes that costs 3-9x what one
``pickle.dumps(batch, protocol=5)`` does (``bench/drainer_kernels.py``,
``drainer_hop_*``). So every hop that carries a batch carries it packed:

- PumpActor → merger: ``pull(..., packed=True)`` (the merger's pump feeds);
- merger → schema keeper: the merged ``(commit_ts, payload)`` items;
- schema keeper → coordinator: the routed summary; → SQL workers: each worker's parts.

:func:`unpack` takes a packed batch or the batch itself (a plain call from a unit
test, an older caller), so each receiving method accepts both. The bytes are
written and read only by this pipeline's own actors, in one Ray cluster, as Ray
itself would pickle them.
"""

from __future__ import annotations

import pickle
from typing import Any

__all__ = ["pack", "unpack"]

_PROTOCOL = 5


def pack(batch: Any) -> bytes:
    """One ``bytes`` holding ``batch`` (a list or tuple of plain values and our models)."""
    return pickle.dumps(batch, _PROTOCOL)


def unpack(value: Any) -> Any:
    """The batch of :func:`pack`'s bytes; anything that is not ``bytes`` as it is."""
    if type(value) is bytes:
        return pickle.loads(value)
    return value
