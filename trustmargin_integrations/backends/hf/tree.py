"""Fast scoring: stems planned off cached prompts and scored in one tree-masked forward pass.

Every scoring request becomes a *stem* off the cached prompt it shares the longest token
prefix with; all stems of a row are packed after that prompt and run in one forward pass with
a tree-shaped 4D attention mask, so no cache is copied, no prefix recomputed, and the
vocabulary projection runs only where an answer token is predicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trustmargin_integrations.backends.base import ContinuationRequest, ContinuationScore
from trustmargin_integrations.backends.hf.batch import DecodingBatch
from trustmargin_integrations.backends.hf.decoding import common_prefix_length, prefill
from trustmargin_integrations.backends.hf.loaded import LoadedModel
from trustmargin_integrations.backends.hf.masks import model_mask

# A prompt is fed as a stem off a cached prompt when at most this many of its tokens are not
# shared: the context-only and question-only views (tens of tokens) qualify; a prompt with
# its own long passage context gets a prefill of its own.
_MAX_STEM_TAIL = 128
# A prompt is prefilled as a branch point only when its sharers would feed at least this many
# fewer tokens in all (below it, one more batch row is not worth its padding).
_MIN_SHARED_PREFIX = 16


@dataclass(frozen=True)
class Stem:
    """Tokens fed after a cached prompt, with several answers scored as children.

    The stem sees the first ``visible`` real tokens of the cached prompt, then its own
    ``feed`` tokens (at least one; the last one's logits predict each answer's first token).
    Every target sees the prompt part and the whole feed, but not the other targets.
    """

    visible: int
    feed: tuple[int, ...]
    targets: tuple[tuple[int, ...], ...]

    @property
    def length(self) -> int:
        """Tokens the stem occupies in the packed sequence."""
        return len(self.feed) + sum(len(t) for t in self.targets)


@dataclass
class CachedPrompts:
    """A prefilled batch (cache cropped to the prompts) kept for scoring, with its prompts'
    token ids; ``consumed`` once a scoring pass has grown its cache."""

    batch: DecodingBatch
    prompts: list[list[int]]
    consumed: bool = False


# -- planning ---------------------------------------------------------------------------------


def score_requests(
    loaded: LoadedModel,
    requests: Sequence[ContinuationRequest],
    caches: list[CachedPrompts],
    known: dict[str, list[int]] | None = None,
) -> list[ContinuationScore]:
    """Score every request as a stem off the cached prompt it shares most tokens with.

    Prompts that no cache covers are prefilled (in length-bucketed batches) first; a prompt
    whose tail after the best shared prefix is short (a context-only view next to its
    question+context view, a question-only view next to any chat prompt) is fed as a stem
    instead. Each cache is consumed by its one scoring pass. ``known`` maps prompts generation
    already tokenized to their ids (a 2k-token prompt is not tokenized twice).
    """
    by_prompt = requests_by_prompt(loaded, requests)
    grouped = {n for targets in by_prompt.values() for n, _ in targets}
    # An empty answer has nothing to score.
    results: list[ContinuationScore | None] = [
        None if n in grouped else ContinuationScore(0.0, 0) for n in range(len(requests))]
    if by_prompt:
        known = known or {}
        encoded = {prompt: known[prompt] if prompt in known else loaded.encode_prompt(prompt)
                   for prompt in by_prompt}
        plan = _plan(loaded, by_prompt, encoded, caches)
        for c, rows in plan.items():
            lanes = split_into_lanes(rows)
            scores = score_stems(loaded, caches[c].batch, [row for row, _ in lanes],
                                 [[stem for stem, _ in stems] for _, stems in lanes])
            for (_, stems), lane_scores in zip(lanes, scores, strict=True):
                flat = [n for _, ns in stems for n in ns]
                for n, score in zip(flat, lane_scores, strict=True):
                    results[n] = score
            caches[c].consumed = True
    return [r for r in results if r is not None]


def requests_by_prompt(
    loaded: LoadedModel, requests: Sequence[ContinuationRequest]
) -> dict[str, list[tuple[int, tuple[int, ...]]]]:
    """Each prompt's (request index, answer ids) pairs; requests with an empty answer are
    left out (nothing to score)."""
    by_prompt: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    for n, req in enumerate(requests):
        answer = tuple(loaded.encode_answer(req.continuation))
        if answer:
            by_prompt.setdefault(req.prompt, []).append((n, answer))
    return by_prompt


def _plan(
    loaded: LoadedModel,
    by_prompt: dict[str, list[tuple[int, tuple[int, ...]]]],
    encoded: dict[str, list[int]],
    caches: list[CachedPrompts],
) -> dict[int, dict[int, list[tuple[Stem, list[int]]]]]:
    """cache -> row -> the stems branching off that row, each with its requests' indices
    (prefilling the prompts no cache covers first)."""
    branches = {p: _best_branch(ids, caches) for p, ids in encoded.items()}
    uncovered = [p for p, branch in branches.items() if branch is None]
    for bucket in _length_buckets(_prefill_choice(uncovered, encoded)):
        bucket_ids = [encoded[p] for p in bucket]
        caches.append(CachedPrompts(prefill(loaded, bucket_ids), bucket_ids))
    for p in uncovered:
        branches[p] = _best_branch(encoded[p], caches, limit=None)
    plan: dict[int, dict[int, list[tuple[Stem, list[int]]]]] = {}
    load: dict[tuple[int, int], int] = {}
    # Longest stems first, each on the least-loaded row that serves it (see _balanced_row).
    chosen = {p: branch for p, branch in branches.items() if branch is not None}
    assert len(chosen) == len(branches)  # every prompt is covered after the prefills
    for prompt in sorted(by_prompt, key=lambda p: _stem_cost(encoded[p], chosen[p][2],
                                                             by_prompt[p]), reverse=True):
        targets = by_prompt[prompt]
        ids = encoded[prompt]
        branch = chosen[prompt]
        c, row, visible = _balanced_row(ids, branch, caches[branch[0]], load, targets)
        stem = Stem(visible, tuple(ids[visible:]), tuple(t for _, t in targets))
        load[c, row] = load.get((c, row), 0) + stem.length
        plan.setdefault(c, {}).setdefault(row, []).append((stem, [n for n, _ in targets]))
    return plan


def _stem_cost(ids: list[int], visible: int, targets: list[tuple[int, tuple[int, ...]]]) -> int:
    """Tokens a prompt's stem packs when it sees ``visible`` cached tokens: its tail and its
    answers."""
    return len(ids) - visible + sum(len(t) for _, t in targets)


def _balanced_row(
    ids: list[int], branch: tuple[int, int, int], cached: CachedPrompts,
    load: dict[tuple[int, int], int], targets: list[tuple[int, tuple[int, ...]]],
) -> tuple[int, int, int]:
    """The row of the branch's cache where this stem leaves the shortest packed row.

    Every row of one pass is padded to its longest packed row, so the pass costs rows x the
    longest row. A prompt that shares only a chat template's header with every cached prompt
    (a question-only view beside passage contexts) sees that header equally from any row;
    putting all such stems on the first best row made one row as long as all of them
    together and the pass that many times longer. Any row whose tail stays within the stem
    limit gives the same likelihoods (the stem sees the same tokens); the cost counted is
    the row's packed tokens after this stem.
    """
    c, best_row, best_visible = branch
    choice = (load.get((c, best_row), 0) + _stem_cost(ids, best_visible, targets), best_row,
              best_visible)
    for row, prompt in enumerate(cached.prompts):
        visible = _visible(ids, prompt)
        if len(ids) - visible > max(_MAX_STEM_TAIL, len(ids) - best_visible):
            continue
        cost = load.get((c, row), 0) + _stem_cost(ids, visible, targets)
        if (cost, -visible) < (choice[0], -choice[2]):
            choice = (cost, row, visible)
    return c, choice[1], choice[2]


# A pass has at most this many lanes per cached row it serves, in all (one long row may take
# several of them): each lane copies its row's keys and values (a 4k-token row of a 7B model
# with grouped-query attention is about half a GB in fp16).
_MAX_LANES_PER_ROW = 2
# The lane lengths tried are read off this many of the longest rows (the rows that set a
# pass's length): the choice runs in Python before every pass, and a batch of 64 questions
# has hundreds of stems.
_ROWS_THAT_SET_LANE_LENGTHS = 8

Lane = tuple[int, list[tuple[Stem, list[int]]]]
"""A packed sequence of one pass: the cached row it continues, and its stems (each with its
requests' indices)."""


def split_into_lanes(rows: dict[int, list[tuple[Stem, list[int]]]]) -> list[Lane]:
    """The rows' stems packed into lanes, a cached row copied into several when that packs
    fewer tokens in all.

    A pass pads every lane to its longest, and a row's stems can only follow that row's
    prompt: one question whose answers are long (three framings of a long answer) made a
    pass of eight rows twice as long as its mean row, half of it padding. The lane length
    chosen is the one that packs the fewest tokens (lanes x longest lane), stems placed
    first-fit, longest first, into lanes of their own row.
    """
    stems = {r: sorted(rows[r], key=lambda s: -s[0].length) for r in sorted(rows)}
    loads = {r: sum(stem.length for stem, _ in row) for r, row in stems.items()}
    longest_stem = max(row[0][0].length for row in stems.values())
    most_lanes = _MAX_LANES_PER_ROW * len(stems)
    longest_rows = sorted(stems, key=lambda r: -loads[r])[:_ROWS_THAT_SET_LANE_LENGTHS]
    limits = {max(longest_stem, -(-loads[r] // k)) for r in longest_rows
              for k in range(1, min(len(stems[r]), most_lanes) + 1)}
    best: tuple[tuple[int, int], list[Lane]] | None = None
    for limit in sorted(limits, reverse=True):
        lanes = [lane for r in stems for lane in _first_fit(r, stems[r], limit)]
        if len(lanes) > most_lanes:
            # Shorter lanes take at least as many (first-fit could, rarely, take one fewer;
            # stopping here keeps the search short).
            break
        cost = (packed_tokens(lanes), len(lanes))
        if best is None or cost < best[0]:
            best = (cost, lanes)
    assert best is not None  # the longest row's load as the limit keeps one lane per row
    return best[1]


def packed_tokens(lanes: Sequence[Lane]) -> int:
    """Tokens a pass over ``lanes`` packs: every lane padded to the longest."""
    return len(lanes) * max(sum(stem.length for stem, _ in stems) for _, stems in lanes)


def _first_fit(row: int, stems: list[tuple[Stem, list[int]]], limit: int) -> list[Lane]:
    """``stems`` (longest first) placed first-fit into lanes of ``row`` of at most ``limit``
    tokens each (a stem longer than the limit gets a lane of its own)."""
    lanes: list[Lane] = []
    room: list[int] = []
    for stem in stems:
        k = next((k for k, free in enumerate(room) if stem[0].length <= free), None)
        if k is None:
            lanes.append((row, []))
            room.append(limit)
            k = len(lanes) - 1
        lanes[k][1].append(stem)
        room[k] -= stem[0].length
    return lanes


def _visible(ids: list[int], cached: list[int]) -> int:
    """Cached tokens a stem of ``ids`` can see: the shared prefix, leaving at least one token
    to feed (its logits predict the answer's first token)."""
    return min(common_prefix_length(ids, cached), len(ids) - 1)


def _best_branch(
    ids: list[int], caches: list[CachedPrompts], limit: int | None = _MAX_STEM_TAIL
) -> tuple[int, int, int] | None:
    """(cache, row, visible tokens) of the cached prompt sharing most of ``ids``'s prefix;
    None when no unconsumed cache leaves a tail of at most ``limit`` tokens."""
    best: tuple[int, int, int] | None = None
    for c, cached in enumerate(caches):
        if cached.consumed:
            continue
        for row, prompt in enumerate(cached.prompts):
            visible = _visible(ids, prompt)
            if best is None or visible > best[2]:
                best = (c, row, visible)
    if best is None or (limit is not None and len(ids) - best[2] > limit):
        return None
    return best


def _prefill_choice(prompts: list[str], encoded: dict[str, list[int]]) -> list[str]:
    """The prompts to prefill so every prompt is covered (longest first, greedy).

    A prompt is prefilled when no chosen prompt leaves it a short tail, and also when it is
    a branch point worth its prefill: several prompts that share a prefix longer than
    anything already chosen (one question's question-only view under several framings of
    its answers) would otherwise each feed that prefix again as a stem. Prefilling a prompt
    recomputes the part it could have seen of the chosen ones, so it is chosen for sharing
    only when the tokens its sharers stop feeding outweigh that.
    """
    ordered = sorted(prompts, key=lambda p: -len(encoded[p]))
    chosen: dict[str, None] = {}  # ordered and a set: the loop asks membership per pair
    seen = {p: 0 for p in ordered}  # tokens each prompt sees of the chosen ones so far
    for prompt in ordered:
        ids = encoded[prompt]
        shares = {q: _visible(encoded[q], ids) for q in ordered if q != prompt}
        saved = sum(max(0, shared - seen[q]) for q, shared in shares.items() if q not in chosen)
        if (not chosen or len(ids) - seen[prompt] > _MAX_STEM_TAIL
                or saved >= max(_MIN_SHARED_PREFIX, seen[prompt])):
            chosen[prompt] = None
            for q, shared in shares.items():
                seen[q] = max(seen[q], shared)
    return list(chosen)


def _length_buckets(prompts: list[str]) -> list[list[str]]:
    """Group prompts of similar length so a left-padded batch wastes little compute."""
    buckets: list[list[str]] = []
    for prompt in sorted(prompts, key=len):
        if buckets and len(prompt) <= 2 * len(buckets[-1][0]):
            buckets[-1].append(prompt)
        else:
            buckets.append([prompt])
    return buckets


# -- the tree-masked pass ---------------------------------------------------------------------


@dataclass
class _Packed:
    """The packed stems of every row: ids, positions, the tree mask, and for each (row, stem,
    target) the packed positions whose logits predict that target's tokens."""

    ids: torch.Tensor
    positions: torch.Tensor
    allowed: torch.Tensor
    predictors: list[list[list[list[int]]]]


def _pack(stems: list[list[Stem]], pads: list[int], width: int, pad_id: int) -> _Packed:
    span = max(sum(stem.length for stem in row) for row in stems)
    n = len(stems)
    ids = torch.full((n, span), pad_id, dtype=torch.long)
    positions = torch.zeros((n, span), dtype=torch.long)
    allowed = torch.zeros((n, 1, span, width + span), dtype=torch.bool)
    predictors: list[list[list[list[int]]]] = []
    for r, row in enumerate(stems):
        start, row_predictors = 0, []
        for stem in row:
            feed_end = start + len(stem.feed)
            ids[r, start:feed_end] = torch.tensor(stem.feed)
            positions[r, start:feed_end] = torch.arange(stem.visible, stem.visible
                                                        + len(stem.feed))
            allowed[r, 0, start:start + stem.length, pads[r]:pads[r] + stem.visible] = True
            allowed[r, 0, start:feed_end, width + start:width + feed_end] = torch.ones(
                (len(stem.feed), len(stem.feed)), dtype=torch.bool).tril()
            cursor, stem_predictors = feed_end, []
            for target in stem.targets:
                stop = cursor + len(target)
                ids[r, cursor:stop] = torch.tensor(target)
                positions[r, cursor:stop] = torch.arange(
                    stem.visible + len(stem.feed), stem.visible + len(stem.feed) + len(target))
                allowed[r, 0, cursor:stop, width + start:width + feed_end] = True
                allowed[r, 0, cursor:stop, width + cursor:width + stop] = torch.ones(
                    (len(target), len(target)), dtype=torch.bool).tril()
                stem_predictors.append([feed_end - 1, *range(cursor, stop - 1)])
                cursor = stop
            row_predictors.append(stem_predictors)
            start = cursor
        for q in range(start, span):
            # Padding queries see only themselves, which keeps softmax finite.
            allowed[r, 0, q, width + q] = True
        predictors.append(row_predictors)
    return _Packed(ids, positions, allowed, predictors)


@torch.inference_mode()
def score_stems(
    loaded: LoadedModel, batch: DecodingBatch, rows: list[int], stems: list[list[Stem]]
) -> list[list[ContinuationScore]]:
    """Score every target of every stem in one forward pass: ``stems[k]`` is packed into one
    short sequence, a lane, after the cached prompt of row ``rows[k]`` (a row may serve
    several lanes, see :func:`split_into_lanes`); a 4D
    attention mask gives every token exactly the context it has in a plain forward pass.
    The cache is consumed (it grows by the packed tokens).
    """
    device = loaded.device
    cache = batch.cache
    if rows != list(range(batch.rows)):
        # A row may appear several times (split_into_lanes): indexing copies it.
        cache.batch_select_indices(torch.tensor(rows, device=device))
    packed = _pack(stems, [batch.pads[r] for r in rows], batch.width, loaded.pad_token_id)
    # Only positions that predict an answer token need the vocabulary projection.
    needed = sorted({p for row in packed.predictors for stem in row for t in stem for p in t})
    column = {p: i for i, p in enumerate(needed)}
    model = loaded.model
    mask = model_mask(model, packed.allowed)
    with loaded.lock:
        logits = model(
            input_ids=packed.ids.to(device), attention_mask=mask.to(device),
            position_ids=packed.positions.to(device), use_cache=True,
            logits_to_keep=torch.tensor(needed, device=device),
            **{loaded.cache_kwarg: cache},
        ).logits
    results: list[list[ContinuationScore]] = []
    for r, row in enumerate(stems):
        scores = []
        for stem, stem_predictors in zip(row, packed.predictors[r], strict=True):
            for target, where in zip(stem.targets, stem_predictors, strict=True):
                cols = torch.tensor([column[p] for p in where], device=device)
                logprobs = logits[r, cols].float().log_softmax(-1)
                picked = logprobs.gather(1, torch.tensor(target, device=device)[:, None])
                scores.append(ContinuationScore(float(picked.sum()), len(target)))
        results.append(scores)
    return results
