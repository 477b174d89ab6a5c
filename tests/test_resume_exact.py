"""Resume equals the uninterrupted run at any batch size.

A model batch's numbers depend, in their low bits, on which questions share it (left padding,
float reduction order: about 1e-6 on CPU). Before, a resumed run re-batched only what was
left, so 23 of 40 ``score`` lines differed from an uninterrupted run at the default batch size.
Now chunks are fixed slices of the whole run (``resumable.run_chunks``): a chunk with anything
missing is recomputed whole, with the members it has in an uninterrupted run.

The first test proves the loop's contract with values that record their chunk's members; the
second kills real ``trustmargin score`` processes (the embedded model) at batch sizes 8 (the
default) and 3 and compares the resumed output with an uninterrupted one, number for number.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.resumable import run_chunks
from trustmargin_integrations.store import ResultStore

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
PEOPLE = ["Marta Okonkwo", "Gustave Eiffel", "Ada Lovelace", "Alan Turing", "Grace Hopper",
          "Nikola Tesla", "Marie Curie", "Isambard Brunel", "Zaha Hadid", "Oscar Niemeyer"]
PLACES = ["Zelvora", "Tarnby", "Orvane", "Kessel", "Ostara", "Brenmoor", "Lintvale"]


class CrashError(Exception):
    """Stands in for a kill at a chosen store append."""


def _chunk_values(chunk: Sequence[int]) -> list[dict[str, Any]]:
    # A value that depends on the chunk's members, as a batched forward pass does.
    return [{"item": item, "members": list(chunk)} for item in chunk]


def test_chunks_are_fixed_slices_of_the_whole_run(tmp_path: Path) -> None:
    items = [*range(11), 4]  # a repeated key is computed once
    whole = ResultStore(tmp_path / "whole.jsonl")
    run_chunks(whole, items, key=str, compute=_chunk_values, batch_size=4, desc="t",
               progress=False)
    for crash_at in range(1, 11):
        store = ResultStore(tmp_path / f"crash{crash_at}.jsonl")
        puts = 0
        real_put = store.put

        def put(key: str, value: Any, real_put: Any = real_put, crash_at: int = crash_at
                ) -> None:
            nonlocal puts
            puts += 1
            if puts == crash_at:
                raise CrashError
            real_put(key, value)

        store.put = put  # type: ignore[method-assign]
        with pytest.raises(CrashError):
            run_chunks(store, items, key=str, compute=_chunk_values, batch_size=4, desc="t",
                       progress=False)
        resumed = ResultStore(store.path)
        computed = run_chunks(resumed, items, key=str, compute=_chunk_values, batch_size=4,
                              desc="t", progress=False)
        assert len(computed) == 11 - (crash_at - 1)
        assert {k: resumed.get(k) for k in resumed} == {k: whole.get(k) for k in whole}


N_QUESTIONS = 11  # two chunks at batch 8, four at batch 3
CRASH_AFTER = 7  # store appends before the crash: mid-chunk at batch 8 (7 of 8) and 3 (1 of 3)


def _write_input(path: Path, n: int = N_QUESTIONS) -> None:
    lines = []
    for i in range(n):
        place, builder = PLACES[i % len(PLACES)], PEOPLE[i % len(PEOPLE)]
        other = PEOPLE[(i * 3 + 1) % len(PEOPLE)]
        if other == builder:
            other = PEOPLE[(i + 5) % len(PEOPLE)]
        # Varied lengths, so that padding differs between batch compositions.
        extra = " It spans the river." * (i % 4)
        lines.append(json.dumps({"id": f"q{i}", "question": f"Who designed bridge {i} of {place}?",
                                 "passages": [f"Bridge {i} of {place} was designed by {builder}."
                                              f"{extra}"],
                                 "direct_answer": other, "rag_answer": builder}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _score(src: Path, out: Path, batch: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "trustmargin_integrations", "score", "-i", str(src),
           "-o", str(out), "--batch-size", str(batch)]
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _decisions(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("timings")
    return rows


def _records(path: Path) -> int:
    try:
        return sum(1 for line in path.read_bytes().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def _run(src: Path, out: Path, batch: int) -> None:
    proc = _score(src, out, batch)
    _, err = proc.communicate(timeout=1200)
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("batch", [8, 3])
def test_killed_and_resumed_score_equals_the_uninterrupted_run(tmp_path: Path,
                                                               batch: int) -> None:
    src = tmp_path / "in.jsonl"
    _write_input(src)
    reference = tmp_path / "reference.jsonl"
    _run(src, reference, batch)

    # A crash right after the 7th store append (mid-chunk at batch 8 and at 3): the store
    # holds what the uninterrupted run appended first, and the output does not exist yet.
    # Before, the 4 records left were re-batched on their own and their numbers moved.
    out = tmp_path / "out.jsonl"
    stored = reference.with_name(reference.name + ".cache").read_bytes().splitlines(True)
    assert len(stored) == N_QUESTIONS
    out.with_name(out.name + ".cache").write_bytes(b"".join(stored[:CRASH_AFTER]))
    _run(src, out, batch)
    assert _decisions(out) == _decisions(reference)

    # A real kill at whatever moment the first decision is stored, then a resume.
    killed = tmp_path / "killed.jsonl"
    cache = killed.with_name(killed.name + ".cache")
    proc = _score(src, killed, batch)
    deadline = time.monotonic() + 1200
    while _records(cache) < 1 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert not killed.exists() or _records(cache) == N_QUESTIONS
    _run(src, killed, batch)
    assert _decisions(killed) == _decisions(reference)
