"""The one resumable chunk loop: compute what the store lacks, one durable chunk at a time.

``trustmargin eval`` (examples and noise levels), ``eval --pipeline`` and ``trustmargin score``
all fill a :class:`~trustmargin_integrations.store.ResultStore` the same way: the work left is
cut into chunks of ``batch_size``, each chunk is computed with one call (one model batch), and
every result of the chunk is appended durably before the next chunk starts. A run killed at
any moment therefore loses at most the chunk in flight, and the next run skips what is stored.

The loop knows nothing of TrustMargin: the caller passes ``compute``, which turns a chunk of
its own work items into the values to store (so this module imports only the store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tqdm.auto import tqdm

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.store import ResultStore

T = TypeVar("T")

ChunkCallback = Callable[[int, int], None]
"""Told ``(done, total pending)`` after each durable chunk."""


def run_chunks(
    store: ResultStore,
    pending: Sequence[T],
    *,
    key: Callable[[T], str],
    compute: Callable[[Sequence[T]], Sequence[Mapping[str, Any]]],
    batch_size: int,
    desc: str,
    total: int | None = None,
    progress: bool = True,
    on_chunk: ChunkCallback | None = None,
) -> None:
    """Compute ``pending`` in chunks and store each chunk's values before the next chunk.

    Args:
        store: where results go (``store.put(key(item), value)``).
        pending: the work items not in the store yet, in the order to compute them.
        key: an item's store key.
        compute: one chunk of items -> one value per item, in order.
        batch_size: items per chunk (and per model call).
        desc: the progress bar's label.
        total: the bar's total when it also counts work done earlier (default: the pending
            items only); the bar starts at ``total - len(pending)``.
        progress: show the progress bar.
        on_chunk: called after each durable chunk with (done, total pending).
    """
    if batch_size < 1:
        raise InvalidInputError("batch_size", f"must be >= 1, got {batch_size}",
                                "use a batch size of 1 or more")
    total = len(pending) if total is None else total
    with tqdm(total=total, initial=total - len(pending), desc=desc, unit="q",
              disable=not progress, dynamic_ncols=True) as bar:
        for start in range(0, len(pending), batch_size):
            chunk = pending[start:start + batch_size]
            values = compute(chunk)
            for item, value in zip(chunk, values, strict=True):
                store.put(key(item), value)
            bar.update(len(chunk))
            if on_chunk is not None:
                on_chunk(start + len(chunk), len(pending))
