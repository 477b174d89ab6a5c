"""End-to-end evaluation on the embedded model and real benchmark questions.

Four ComplexWebQuestions questions with their real BM25 top-3 DPR-wiki passages are run
through the real SmolLM2 backend: resume after an interruption, replaying a grid cell from the
cache versus recomputing it, the noise experiment and the rendered report.

The benchmark files are read where they lie (``$TRUSTMARGIN_DATA``, by default
``../shared/data/raw`` beside the repository); they are never copied into the repository.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.cli import app
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample, load_dataset, passage_pool
from trustmargin_integrations.evaluation.diagnostics import (
    method_scores,
    score_records,
)
from trustmargin_integrations.evaluation.rundir import load_run, open_store, record_dataset
from trustmargin_integrations.evaluation.runner import (
    EvalRecord,
    PrecomputedPassages,
    run_eval,
    run_noise,
)
from trustmargin_integrations.rule.replay import kept_rag, replay

# The benchmark data lies beside the repository (../shared/data/raw) unless told otherwise.
DATA_DIR = Path(os.environ.get("TRUSTMARGIN_DATA")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "raw")
N_QUESTIONS = 4
BATCH = 2


class CountingBackend:
    """The real backend with its model calls counted (instrumentation, not a stand-in)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.questions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextmanager
    def session(self) -> Iterator[Any]:
        """Counts model sessions (one per batch) and the questions whose Direct answer each
        generates (every question of a fresh eval batch gets one)."""
        self.calls += 1
        with self.inner.session() as inner:
            outer = self

            class Counted:
                def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                             stop: Any = None) -> list[str]:
                    if any("CONTEXT" not in p for p in prompts):
                        outer.questions += len(prompts)
                    return inner.generate(prompts, max_new_tokens, stop=stop)

                def score(self, requests: Sequence[Any]) -> Any:
                    return inner.score(requests)

            yield Counted()


class InterruptedRunError(Exception):
    """Raised from the progress callback to stop a run mid-way, like Ctrl-C."""


@pytest.fixture(scope="module")
def examples() -> list[EvalExample]:
    assert (DATA_DIR / "prag").is_dir(), (
        f"benchmark data not found under {DATA_DIR}; set TRUSTMARGIN_DATA to the folder "
        "holding prag/complexwebquestions_total.json")
    return load_dataset("cwq", DATA_DIR)[:N_QUESTIONS]


@pytest.fixture(scope="module")
def full_run(tm: TrustMargin, examples: list[EvalExample], tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, list[EvalRecord]]:
    """One uninterrupted run: the reference for every other test here."""
    run_dir = tmp_path_factory.mktemp("full")
    records = run_eval(tm, examples, open_store(run_dir), source=PrecomputedPassages(),
                       top_k=3, batch_size=BATCH, progress=False)
    record_dataset(run_dir, "cwq", records, {"retrieval": "precomputed", "top_k": 3,
                                             "batch_size": BATCH, "command": "pytest"})
    return run_dir, records


@pytest.mark.slow
def test_interrupted_run_resumes_without_recomputation(
    tm: TrustMargin, examples: list[EvalExample], full_run: tuple[Path, list[EvalRecord]],
    tmp_path: Path,
) -> None:
    counting = CountingBackend(tm.backend)
    counted = TrustMargin(counting, tm.config)

    def stop_after_first_batch(done: int, total: int) -> None:
        raise InterruptedRunError(f"stopped after {done} of {total}")

    with pytest.raises(InterruptedRunError):
        run_eval(counted, examples, open_store(tmp_path), source=PrecomputedPassages(),
                 top_k=3, batch_size=BATCH, progress=False, on_chunk=stop_after_first_batch)
    assert (counting.calls, counting.questions) == (1, BATCH)
    assert len(open_store(tmp_path)) == BATCH  # the finished batch is durable

    resumed = run_eval(counted, examples, open_store(tmp_path), source=PrecomputedPassages(),
                       top_k=3, batch_size=BATCH, progress=False)
    assert counting.questions == N_QUESTIONS  # only the unfinished questions were computed
    assert sum(r.computed for r in resumed) == N_QUESTIONS - BATCH

    again = run_eval(counted, examples, open_store(tmp_path), source=PrecomputedPassages(),
                     top_k=3, batch_size=BATCH, progress=False)
    assert counting.questions == N_QUESTIONS and not any(r.computed for r in again)

    # Same candidates, likelihoods and final numbers as the uninterrupted run.
    _, reference = full_run
    strip = {"timings"}
    for ours, ref in zip(again, reference, strict=True):
        assert ours.key == ref.key
        assert ours.decision.model_dump(exclude=strip) == ref.decision.model_dump(exclude=strip)
    assert method_scores(score_records(again)) == method_scores(score_records(reference))


@pytest.mark.slow
def test_replayed_grid_cell_equals_recomputing_it(
    tm: TrustMargin, full_run: tuple[Path, list[EvalRecord]]
) -> None:
    _, records = full_run
    scored = [r for r in records if r.decision.m is not None]
    assert scored, "every sampled question was settled without scoring; pick other questions"
    lam, tau = 1.0, -0.5
    # The run's short answers given back are scored whole, as the run scored them.
    other = TrustMargin(tm.backend, TrustMarginConfig(lambda_bind=lam, tau=tau,
                                                      scoring_form="paper"))
    recomputed = other.arbitrate_batch([
        {"question": r.example.question, "passages": list(r.passages),
         "direct_answer": r.decision.direct_answer, "rag_answer": r.decision.rag_answer}
        for r in records
    ])
    for rec, fresh in zip(records, recomputed, strict=True):
        replayed = replay(rec.decision, lambda_bind=lam, tau=tau)
        assert replayed == ("rag" if kept_rag(fresh) else "direct")
        if fresh.m is not None:
            assert rec.decision.m_prior == pytest.approx(fresh.m_prior, abs=1e-3)
            assert rec.decision.m_bind == pytest.approx(fresh.m_bind, abs=1e-3)


@pytest.mark.slow
def test_noise_run_and_report_render_from_the_cache(
    tm: TrustMargin, examples: list[EvalExample], full_run: tuple[Path, list[EvalRecord]]
) -> None:
    run_dir, records = full_run
    pool = [p.as_context() for p in passage_pool(load_dataset("cwq", DATA_DIR))]
    noise = run_noise(tm, records[:2], open_store(run_dir), pool=pool, levels=[0, 3], seed=7,
                      top_k=3, batch_size=BATCH, progress=False)
    assert [n.n_replaced for n in noise] == [0, 0, 3, 3]
    assert all(n.decision.direct_answer == r.decision.direct_answer
               for n, r in zip(noise[2:], records[:2], strict=True))
    assert all(not n.decision.direct_generated and n.decision.rag_generated
               for n in noise[2:])
    record_dataset(run_dir, "cwq", records, {"retrieval": "precomputed", "top_k": 3,
                                             "batch_size": BATCH, "command": "pytest"},
                   noise, {"seed": 7, "levels": [0, 3], "pool": "cwq passages", "n": 2})

    result = CliRunner().invoke(app, ["report", str(run_dir), "--title", "Small real run"])
    assert result.exit_code == 0, result.output
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    for section in ("## Main results", "## Margin ablation", "## Source-arbitration diagnostics",
                    "## Disagreement recovery", "## Hyper-parameter robustness",
                    "## Retrieval-noise robustness", "## Latency on this machine"):
        assert section in report
    table = method_scores(score_records(load_run(run_dir)[0].records))
    direct_f1, direct_em = table["direct"]
    assert f"| Direct | {direct_f1:.2f} | {direct_em:.2f} |" in report
    for png in ("hparam_heatmap.png", "recovery_cwq.png", "noise_curves.png"):
        data = (run_dir / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])
        assert width > 300 and height > 200
        assert f"]({png})" in report



def test_links_planted_in_a_run_directory_never_reach_outside(tmp_path: Path) -> None:
    """A run directory whose cache or manifest is a link to a file elsewhere: ``eval`` must
    not append to it, ``report`` / ``calibrate`` must not read it, and the manifest writer
    must not replace it (before, ``eval`` appended its records to the outside file)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    victim = outside / "notes.txt"
    victim.write_text("mine\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "cache.jsonl").symlink_to(victim)
    with pytest.raises(InvalidInputError, match="symbolic link"):
        open_store(run).put("k", {"decision": {}})
    (run / "cache.jsonl").unlink()
    (run / "manifest.json").symlink_to(outside / "manifest.json")
    (outside / "manifest.json").write_text('{"datasets": {}}', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="leads outside the run directory"):
        load_run(run)
    with pytest.raises(InvalidInputError, match="leads outside the run directory"):
        record_dataset(run, "cwq", [], {"model": "m"})
    assert victim.read_text(encoding="utf-8") == "mine\n"
    assert (outside / "manifest.json").read_text(encoding="utf-8") == '{"datasets": {}}'
    assert sorted(p.name for p in outside.iterdir()) == ["manifest.json", "notes.txt"]
