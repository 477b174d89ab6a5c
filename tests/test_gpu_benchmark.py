"""The GPU benchmark (benchmarks/gpu.py) runs end to end on CPU with a tiny random model."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trustmargin_gpu_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cpu_run_writes_every_measurement(tmp_path: Path) -> None:
    bench = load_benchmark()
    out = tmp_path / "gpu.json"
    threads = torch.get_num_threads()
    # One thread: a tiny model gains nothing from two, and OpenMP barriers stall badly when
    # the machine's other core is busy.
    torch.set_num_threads(1)
    try:
        returned = bench.main(["--device", "cpu", "--shape", "tiny", "--questions", "2",
                               "--batch-sizes", "1", "2", "--context-tokens", "256",
                               "--decode-tokens", "8", "--loop-batch-sizes", "1", "2",
                               "--growth", "3", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)

    results = json.loads(out.read_text(encoding="utf-8"))
    assert set(results) >= {"meta", "decode", "decode_loops", "latency", "throughput",
                            "agreement", "growth", "tables"}
    assert results["tables"] == returned["tables"]
    meta = results["meta"]
    assert meta["device"] == "cpu" and meta["dtype"] == "float32" and meta["shape"] == "tiny"
    assert meta["context_tokens"] == 256 and 0 < meta["context_tokens_used"] <= 256
    assert meta["weights_allocated_gb"] is None  # no CUDA memory on CPU

    decode = results["decode"]
    assert decode["new_tokens"] == 8 and decode["backend_tokens_made"] == 8
    assert decode["prefill_s"] > 0 and decode["prompt_tokens"] > 0
    assert decode["backend_loop"] == "dynamic"  # the default off CUDA

    # The loops compared: on CPU the plain and the static-cache loop (no CUDA graph), each
    # with the plain loop's tokens, every row of the left-padded batch.
    loops = results["decode_loops"]
    assert [(r["batch_size"], r["loop_used"]) for r in loops] == [
        (1, "dynamic"), (1, "static"), (2, "dynamic"), (2, "static")]
    for row in loops:
        assert row["per_token_s"] > 0 and row["new_tokens"] == 8
        assert row["prompt_tokens"] == decode["prompt_tokens"]
        assert row["rows_same_tokens_as_plain"] == row["rows"] == row["batch_size"]

    latency = results["latency"]
    assert latency["trustmargin_s"] > 0 and latency["generation_s"] > 0
    assert latency["ratio"] > 0 and latency["questions"] == 2 and latency["memory"] is None

    rows = {row["batch_size"]: row for row in results["throughput"]}
    assert set(rows) == {1, 2}
    for row in rows.values():
        assert row["questions"] == 2
        assert row["trustmargin_qps"] > 0 and row["generation_qps"] > 0
        assert 0 < row["prepare_share"] < 1
        assert row["memory"] is None

    checks = results["agreement"]
    assert {c["set"] for c in checks} == {"generated, batch 1", "generated, batch 2",
                                          "candidates given, batch 2"}
    compared = [c for c in checks if c["likelihoods"]]
    assert compared, "no scored decision to compare with the plain reference"
    for check in compared:
        assert check["likelihoods"] == 6 * check["questions"]
        assert check["max_abs_diff"] < 1e-4, check

    growth = results["growth"]
    assert growth["runs"] == 3 and len(growth["shapes"]) == 3
    assert growth["allocated_growth_gb"] is None  # CUDA only

    tables = results["tables"]
    for heading in ("### 1.", "### 1b.", "### 2.", "### 3-5.", "### 6.", "### 7."):
        assert heading in tables
    assert "n/a" in tables  # memory columns on CPU


def test_synthetic_passages_when_data_is_missing(tmp_path: Path) -> None:
    bench = load_benchmark()

    class Counter:
        def count_tokens(self, text: str) -> int:
            return len(text.split())

    items, source = bench.load_items(Counter(), tmp_path / "absent", 3, 200)
    assert source.startswith("SYNTHETIC")
    assert len(items) == 3
    for item in items:
        assert item["question"] and item["passages"]
        assert sum(len(p.split()) + 3 for p in item["passages"]) <= 200


def test_prepare_benchmark_prints_batched_and_single_paths_that_agree(
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location(
        "trustmargin_prepare_benchmark", SCRIPT.with_name("prepare.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--questions", "6", "--context-tokens", "400", "--batch-sizes", "1",
                        "4", "--repeats", "1"])
    assert [r["batch_size"] for r in rows] == [1, 4]
    assert all(r["same"] and r["batched_ms"] > 0 and r["one_ms"] > 0 for r in rows)
    printed = capsys.readouterr().out
    assert "| 4 |" in printed and "6 questions" in printed
