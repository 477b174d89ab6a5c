"""Fault injection on ``trustmargin score``: real processes killed at random moments, resumed.

Every run here is a real ``python -m trustmargin_integrations score`` process on the embedded
model (SmolLM2-135M, CPU, one thread), reading and writing real files.

The main test builds a 2,500-line candidates file from 200 distinct short records (each
distinct record repeated with its own id and extra keys; identical records share one key in
the content-keyed store, so duplicates are exercised too). 24 distinct records disagree and
need the six likelihoods; the rest settle without scoring (the candidates agree, one is
blank, or there is no passage), which keeps the run inside CI's time on 2 cores. One
uninterrupted run is the reference. Then 8 runs are killed at seeded random moments, in each
of four phases once with SIGKILL and once with SIGINT: during start-up (before or while the
model loads), at a random time while decisions are computed, right as a store record is
appended, and while the output is being written. After every kill the output must be absent
or complete (atomic rename), and every store record must equal the reference's. A final run
then finishes the job: its output must equal the uninterrupted one (decisions compared
without ``timings``), with no line lost or duplicated and the ids in input order.

``--batch-size 1``: on CPU, batching changes the low bits of the likelihoods (left padding;
about 1e-6 measured), so only batch-invariant computation can be compared exactly with an
uninterrupted run. One question per call is also the fastest setting on this machine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.store import ResultStore

pytestmark = pytest.mark.slow

SEED = 20_240_611
N_LINES = 2_500
N_SCORED = 24  # distinct records that need the six likelihoods
N_CHEAP = 176  # distinct records settled without scoring
SIGNALS = (signal.SIGKILL, signal.SIGINT)  # each phase is killed once by each, seeded order
BATCH = "1"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
MOST_RECORDS = 12  # a compute kill fires by 4 to this many new records at the latest
HANG_S = 120  # a killed or finishing process must be gone within this many seconds

PEOPLE = ["Marta Okonkwo", "Gustave Eiffel", "Ada Lovelace", "Alan Turing", "Grace Hopper",
          "Nikola Tesla", "Marie Curie", "Isambard Brunel", "Zaha Hadid", "Oscar Niemeyer"]
THINGS = ["bridge", "tower", "canal", "library", "museum", "station", "dam", "harbour"]
PLACES = ["Zelvora", "Tarnby", "Zürich", "São Paulo", "Orvane", "東京", "Kessel", "Ostara"]


def _pool() -> list[dict[str, Any]]:
    """200 distinct short records: 24 that need scoring, 176 that settle without it."""
    pool = []
    for i in range(N_SCORED):
        place, thing = PLACES[i % len(PLACES)], THINGS[(i // len(PLACES)) % len(THINGS)]
        builder, other = PEOPLE[i % len(PEOPLE)], PEOPLE[(i * 3 + 1) % len(PEOPLE)]
        if other == builder:
            other = PEOPLE[(i + 5) % len(PEOPLE)]
        pool.append({"question": f"Who designed the {place} {thing}?",
                     "passages": [f"The {place} {thing} was designed by {builder}."],
                     "direct_answer": other, "rag_answer": builder})
    for i in range(N_CHEAP):
        place, thing = PLACES[i % len(PLACES)], THINGS[i % len(THINGS)]
        person = PEOPLE[i % len(PEOPLE)]
        base = {"question": f"Who built {place} {thing} number {i}?",
                "passages": [f"{place} {thing} {i} was built by {person}."]}
        kind = i % 4
        if kind == 0:  # the candidates agree after cleaning
            base.update(direct_answer=person, rag_answer=f"{person.lower()}.")
        elif kind == 1:  # a blank RAG answer
            base.update(direct_answer=person, rag_answer="")
        elif kind == 2:  # a blank Direct answer
            base.update(direct_answer="  ", rag_answer=person)
        else:  # nothing retrieved
            base.update(passages=[], direct_answer=person, rag_answer=PEOPLE[0])
        pool.append(base)
    return pool


def _write_input(path: Path) -> list[str | None]:
    """The candidates file; returns the id each decision must carry, in input order."""
    rng = random.Random(SEED)
    pool = _pool()
    order = list(range(len(pool))) + [rng.randrange(len(pool))
                                       for _ in range(N_LINES - len(pool))]
    rng.shuffle(order)
    lines, expected = [], []
    unnamed = 1  # the line number (so the id) of the latest line without an id
    for j, index in enumerate(order):
        record: dict[str, Any] = dict(pool[index])
        number = len(lines) + 1
        style = j % 10
        if style == 0:
            unnamed = number  # no id: the line number becomes the id
        elif style == 1:
            record["id"] = "dup"  # the same id on many lines
        elif style == 2:
            record["id"] = unnamed  # an int id equal to an id-less line's number
        elif style == 3:
            record["id"] = None
        else:
            record["id"] = f"r{j}"
        record["seq"] = j  # an extra key: carried to metadata; proves the order
        if j % 7 == 0:
            record["metadata"] = {"source": "fault-test", "n": j % 3}
        lines.append(json.dumps(record, ensure_ascii=j % 2 == 0))
        expected.append(str(number) if style == 0 else
                        None if style == 3 else str(record["id"]))
        if j in (500, 1500):
            lines.append("   ")  # a blank line is skipped but still counts as a line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return expected


def _default_sigint() -> None:
    # A shell without job control starts background jobs with SIGINT ignored, and a child
    # inherits that: run so, SIGINT kills did nothing (exit 0). The run must feel SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _score(src: Path, out: Path, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "trustmargin_integrations", "score", "-i", str(src),
           "-o", str(out), "--batch-size", BATCH]
    with log.open("ab") as sink:
        return subprocess.Popen(cmd, env=ENV, stdout=sink, stderr=subprocess.STDOUT,
                                preexec_fn=_default_sigint)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _temps(out: Path) -> set[str]:
    return {p.name for p in out.parent.glob(out.name + ".*.tmp")}


def _decisions(path: Path) -> list[dict[str, Any]]:
    """The output's decisions without their timings (which differ run to run)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row.pop("timings")
    return rows


def _result(value: dict[str, Any]) -> dict[str, Any]:
    """A stored decision without what differs between records that share it."""
    return {k: v for k, v in value.items() if k not in ("timings", "id", "metadata")}


@dataclass
class Reference:
    src: Path
    out: Path
    expected_ids: list[str | None]
    first_store_s: float  # start-up plus the first decision
    total_s: float
    distinct: int
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """One uninterrupted run: the output every interrupted sequence must reproduce."""
    root = tmp_path_factory.mktemp("reference")
    src, out = root / "in.jsonl", root / "out.jsonl"
    expected = _write_input(src)
    cache = out.with_name(out.name + ".cache")
    began = time.monotonic()
    proc = _score(src, out, root / "log.txt")
    first = None
    while proc.poll() is None:
        if first is None and _size(cache) > 0:
            first = time.monotonic() - began
        time.sleep(0.005)
    total = time.monotonic() - began
    log = (root / "log.txt").read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    store = ResultStore(cache)
    assert f"{len(expected)} decisions in" in log and f"{len(store)} computed, 0 reused" in log
    assert len(store) == N_SCORED + N_CHEAP
    return Reference(src, out, expected, first or total, total, len(store),
                     {key: _result(store.get(key) or {}) for key in store})


@dataclass
class Kill:
    kind: str
    sig: signal.Signals
    at_s: float = 0.0
    rc: int | None = None
    stored_before: int = 0
    stored_after: int = 0
    saw_temp: bool = False
    interrupted: bool = False


def _records(path: Path) -> int:
    """Records appended to a store so far (one JSONL line each; a torn last line counts too)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _kill_when(proc: subprocess.Popen[bytes], kill: Kill, cache: Path, out: Path,
               delay: float | None, most_records: int | None = None) -> None:
    """Send ``kill.sig`` after ``delay`` seconds, or (delay None) on the kind's event:
    the store grows ("append") or a temporary output file appears ("write").

    ``most_records`` caps how many records the run may append before it is killed anyway:
    how fast a run stores records depends on which ones are left (most settle without the
    model) and on the machine's load, so a delay alone could let one run finish the job and
    leave the later kills nothing to interrupt (seen once in CI).
    """
    began = time.monotonic()
    size, temps, records = _size(cache), _temps(out), _records(cache)
    while proc.poll() is None:
        now = time.monotonic() - began
        if kill.kind == "write" and _temps(out) - temps:
            kill.saw_temp = True
            fire = True
        elif kill.kind == "append":
            fire = _size(cache) != size
        else:
            fire = (delay is not None and now >= delay) or (
                most_records is not None and _records(cache) - records >= most_records)
        if fire:
            proc.send_signal(kill.sig)
            kill.at_s = now
            break
        time.sleep(0.002)
    try:
        kill.rc = proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"score did not stop within {HANG_S} s of {kill.sig.name} ({kill.kind})")
    kill.interrupted = kill.rc != 0


def _check_invariants(ref: Reference, out: Path, cache: Path, kill: Kill) -> None:
    """What must hold at any moment: the output is absent or complete, the store is right."""
    if out.exists():
        assert _decisions(out) == _decisions(ref.out), (
            f"after {kill}, the output exists but differs from the complete one")
    store = ResultStore(cache)
    for key in store:
        assert key in ref.stored, f"after {kill}, the store holds an unknown key {key}"
        assert _result(store.get(key) or {}) == ref.stored[key], (
            f"after {kill}, the stored decision of {key} differs from the reference")
    kill.stored_after = len(store)


def test_score_killed_in_every_phase_by_both_signals_resumes_to_the_uninterrupted_output(
    reference: Reference, tmp_path: Path
) -> None:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    shutil.copyfile(reference.src, src)
    cache = out.with_name(out.name + ".cache")
    log = tmp_path / "log.txt"
    rng = random.Random(SEED)
    # Kills that need work left (compute, append, start-up) come first; a compute kill lets
    # its run append at most MOST_RECORDS records, so at most 2 * 12 + 2 + 2 of the 200 are
    # stored before the write kills and every earlier kill finds a run with work left,
    # however fast or loaded the machine (a start-up kill lets it append at most one). The
    # output is written only once everything is computed, so the write kills come last.
    def both_signals(kind: str) -> list[Kill]:
        return [Kill(kind, sig) for sig in rng.sample(SIGNALS, len(SIGNALS))]

    kills = both_signals("compute") + both_signals("append")
    rng.shuffle(kills)
    kills += both_signals("startup") + both_signals("write")
    kinds = [kill.kind for kill in kills]
    compute_s = reference.total_s - reference.first_store_s
    for number, kill in enumerate(kills):
        kill.stored_before = len(ResultStore(cache)) if cache.exists() else 0
        # The first start-up kill lands inside the interpreter's imports (well under the
        # second that importing torch alone takes), so one kill surely precedes any record of
        # its run; the others may land anywhere up to the reference's first record.
        first_startup = kinds.index("startup") == number
        delay = {"startup": rng.uniform(0.05, 0.5 if first_startup else reference.first_store_s),
                 "compute": reference.first_store_s + rng.uniform(0.02, 0.2) * compute_s,
                 }.get(kill.kind)
        # A start-up kill also fires on the run's first new record: a warm run with little
        # left could otherwise finish inside a delay drawn from the (cold) reference's
        # start-up time, and leave nothing to interrupt (seen once in CI: rc 0 at 4.2 s).
        cap = rng.randint(4, MOST_RECORDS) if kill.kind == "compute" else None
        if kill.kind == "startup":
            cap = 1
        _kill_when(_score(src, out, log), kill, cache, out, delay, cap)
        _check_invariants(reference, out, cache, kill)

    final = _score(src, out, log)
    assert final.wait(timeout=600) == 0, log.read_text(errors="replace")[-3000:]
    decisions = _decisions(out)
    assert decisions == _decisions(reference.out)
    # No line lost or duplicated, ids in input order, every line's own extra keys kept.
    assert [d["id"] for d in decisions] == reference.expected_ids
    assert [d["metadata"]["seq"] for d in decisions] == list(range(N_LINES))
    assert src.read_bytes() == reference.src.read_bytes()  # the input is never touched

    summary = [(k.kind, k.sig.name, round(k.at_s, 2), k.rc, k.stored_before, k.stored_after,
                k.saw_temp) for k in kills]
    interrupted = [k for k in kills if k.interrupted]
    print("kills:", *summary, sep="\n  ")
    # The kills really interrupted runs, in every phase, with both signals (on a busy machine
    # a run may finish before its kill lands: two of the eight may miss, as four of the
    # former twenty could).
    assert len(interrupted) >= len(kills) - 2, summary
    assert {k.sig for k in interrupted} == {signal.SIGKILL, signal.SIGINT}, summary
    assert any(k.kind == "startup" and k.stored_after == k.stored_before < reference.distinct
               for k in interrupted), summary  # before any decision of that run
    assert any(k.kind in ("compute", "append") and k.stored_after > k.stored_before
               for k in interrupted), summary  # after some durable progress
    assert any(k.kind == "write" and k.saw_temp for k in interrupted), summary  # mid-write
    print("kills:", *summary, sep="\n  ")


# -- damaged stores ----------------------------------------------------------------------------


def _damaged_copy(reference: Reference, root: Path) -> tuple[Path, Path, Path, list[str]]:
    src, out = root / "in.jsonl", root / "out.jsonl"
    shutil.copyfile(reference.src, src)
    cache = out.with_name(out.name + ".cache")
    shutil.copyfile(reference.out.with_name(reference.out.name + ".cache"), cache)
    return src, out, cache, cache.read_text(encoding="utf-8").splitlines(keepends=True)


def _run_to_end(src: Path, out: Path, root: Path) -> str:
    proc = _score(src, out, root / "log.txt")
    rc = proc.wait(timeout=600)
    log = (root / "log.txt").read_text(errors="replace")
    assert rc == 0, log[-3000:]
    return log


def test_a_store_record_with_a_bad_checksum_is_recomputed_not_used(
    reference: Reference, tmp_path: Path
) -> None:
    src, out, cache, lines = _damaged_copy(reference, tmp_path)
    scored = next(i for i, line in enumerate(lines) if json.loads(line)["value"]["m"] is not None)
    record = json.loads(lines[scored])
    record["value"]["source"] = "direct" if record["value"]["source"] != "direct" else "rag"
    record["value"]["m"] = 99.0  # bit rot or a hand edit; the checksum no longer matches
    lines[scored] = json.dumps(record, ensure_ascii=False) + "\n"
    cache.write_text("".join(lines), encoding="utf-8")
    log = _run_to_end(src, out, tmp_path)
    assert f"1 computed, {reference.distinct - 1} reused" in log
    assert _decisions(out) == _decisions(reference.out)


def test_a_store_torn_inside_a_multibyte_character_is_resumed(
    reference: Reference, tmp_path: Path
) -> None:
    """A crash (or a full disk) mid-append can cut the last record anywhere, also between
    the bytes of one UTF-8 character (the store writes non-ASCII text as is)."""
    src, out, cache, lines = _damaged_copy(reference, tmp_path)
    victim = next(i for i, line in enumerate(lines) if "東京" in line)
    data = lines.pop(victim).encode("utf-8")
    cut = data.index("東京".encode()) + 1  # inside the first character's three bytes
    cache.write_bytes("".join(lines).encode("utf-8") + data[:cut])
    log = _run_to_end(src, out, tmp_path)
    assert f"1 computed, {reference.distinct - 1} reused" in log
    assert _decisions(out) == _decisions(reference.out)


# -- refused paths, as a user sees them ---------------------------------------------------------


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trustmargin_integrations", *args], env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def test_unsafe_paths_exit_2_with_one_line_and_touch_nothing(tmp_path: Path) -> None:
    """tests/test_cli.py checks the errors in-process; here the real command: exit code 2,
    one ``error`` line, no traceback, no model load, and no file written or changed."""
    good = {"question": "Who designed the Zelvora Bridge?",
            "passages": ["The Zelvora Bridge was designed by Marta Okonkwo."],
            "direct_answer": "Gustave Eiffel", "rag_answer": "Marta Okonkwo"}
    src = tmp_path / "data.jsonl"
    src.write_text(json.dumps(good) + "\n", encoding="utf-8")
    folder = tmp_path / "folder"
    folder.mkdir()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    cases = [
        (["-i", str(src), "-o", str(folder)], "--output", "is a directory"),
        (["-i", str(src), "-o", str(src)], "--output", "is the input file"),
        (["-i", str(src), "-o", str(tmp_path / "x" / ".." / "data.jsonl")], "--output",
         "is the input file"),
        (["-i", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o.jsonl")], "--input",
         "is not a file"),
        (["-i", str(empty), "-o", str(tmp_path / "o.jsonl")], "--input", "holds no record"),
    ]
    before = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for args, field_name, problem in cases:
        done = _cli("score", *args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stdout, done.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith(f"error {field_name}"), done.stderr
        assert problem in lines[0] and "Fix:" in lines[0], done.stderr
        assert "Traceback" not in done.stderr and "Loading weights" not in done.stderr
        after = {p: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
        assert after == before, f"{args} wrote or changed a file"
    assert list(folder.iterdir()) == []
