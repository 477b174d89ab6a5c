"""The one resumable chunk loop: compute what the store lacks, one durable chunk at a time.

``trustmargin eval`` (with ``--pipeline``) and ``trustmargin score`` cut the work left into
chunks of ``batch_size``, compute each with one call and append its results durably before
the next, so a killed run loses at most the chunk in flight. The caller's ``compute`` does
the work; this module imports only the store.
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
    items: Sequence[T],
    *,
    key: Callable[[T], str],
    compute: Callable[[Sequence[T]], Sequence[Mapping[str, Any]]],
    batch_size: int,
    desc: str,
    progress: bool = True,
    on_chunk: ChunkCallback | None = None,
) -> list[str]:
    """Compute what the store lacks of ``items``, one durable chunk at a time.

    Chunks are fixed slices of ``items`` (the whole work, in a deterministic order), not of
    what is left: a chunk with anything missing is computed *whole*, with the same members as
    in an uninterrupted run, and only its missing values are stored. A model batch's numbers
    depend (by ~1e-6, float reduction order and padding) on which questions share it, so this
    is what makes a resumed run's output equal an uninterrupted one at any batch size; it costs
    at most one chunk of recomputation per interruption. Items whose key repeats an earlier
    item's are computed once.

    Args:
        store: where results go (``store.put(key(item), value)``).
        items: every work item of the run, stored or not, in the order to compute them.
        key: an item's store key.
        compute: one chunk of items -> one value per item, in order.
        batch_size: items per chunk (and per model call).
        desc: the progress bar's label.
        progress: show the progress bar.
        on_chunk: called after each computed chunk with (items done, items in the run).

    Returns:
        The keys computed by this call (the rest were in the store already).
    """
    if batch_size < 1:
        raise InvalidInputError("batch_size", f"must be >= 1, got {batch_size}",
                                "use a batch size of 1 or more")
    first: dict[str, T] = {}  # each key once, at its first item
    for item in items:
        first.setdefault(key(item), item)
    unique = list(first.values())
    chunks = [unique[start:start + batch_size] for start in range(0, len(unique), batch_size)]
    stored = sum(key(item) in store for item in unique)
    computed: list[str] = []
    with tqdm(total=len(unique), initial=stored, desc=desc, unit="q",
              disable=not progress, dynamic_ncols=True) as bar:
        done = 0
        for chunk in chunks:
            done += len(chunk)
            missing = [key(item) for item in chunk if key(item) not in store]
            if not missing:
                continue
            values = compute(chunk)
            for item, value in zip(chunk, values, strict=True):
                if key(item) in missing:
                    store.put(key(item), value)
            computed += missing
            bar.update(len(missing))
            if on_chunk is not None:
                on_chunk(done, len(unique))
    return computed
