"""Model resolution and the verified safetensors cache (real embedded GGUF)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from trustmargin_integrations.errors import CacheCorruptError, ModelLoadError
from trustmargin_integrations.model_store import (
    MANIFEST,
    REGISTRY,
    assemble_split_gguf,
    cached_conversion,
    converted_cache_dir,
    resolve_model,
    verify_cache_entry,
)


@pytest.mark.slow
def test_corrupt_cache_is_detected_and_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: object
) -> None:
    # `backend` guarantees the real cache entry exists; copy it into a private cache root.
    gguf = REGISTRY["smollm2-135m"].locate()
    real = cached_conversion(gguf)
    monkeypatch.setenv("TRUSTMARGIN_CACHE", str(tmp_path))
    private = converted_cache_dir(gguf)
    assert private != real
    shutil.copytree(real, private)
    verify_cache_entry(private)

    config = private / "config.json"
    config.write_text(config.read_text().replace('"llama"', '"llamb"'))
    with pytest.raises(CacheCorruptError, match="SHA-256"):
        verify_cache_entry(private)

    rebuilt = cached_conversion(gguf)  # detects the corruption and converts again
    assert rebuilt == private
    verify_cache_entry(rebuilt)
    assert '"llama"' in config.read_text()


def test_interrupted_conversion_is_never_used(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    entry.mkdir()
    (entry / "model.safetensors").write_bytes(b"partial")
    with pytest.raises(CacheCorruptError, match="no manifest"):
        verify_cache_entry(entry)
    (entry / MANIFEST).write_text('{"files": {"model.safetensors": {"size": 99, "sha256": ""}}}')
    with pytest.raises(CacheCorruptError, match="wrong size"):
        verify_cache_entry(entry)


def test_split_gguf_assembly_verifies_the_checksum(tmp_path: Path) -> None:
    import hashlib

    parts = []
    for i, chunk in enumerate((b"GGUF", b"-part-two", b"-three")):
        part = tmp_path / f"part{i:02d}.bin"
        part.write_bytes(chunk)
        parts.append(part)
    whole = b"GGUF-part-two-three"
    out = assemble_split_gguf(parts, tmp_path / "m.gguf", len(whole),
                              hashlib.sha256(whole).hexdigest())
    assert out.read_bytes() == whole
    with pytest.raises(ModelLoadError, match="sha256"):
        assemble_split_gguf(parts, tmp_path / "bad.gguf", len(whole), "0" * 64)
    assert not (tmp_path / "bad.gguf").exists()
    assert not (tmp_path / "bad.gguf.partial").exists()


def test_resolution_of_names_paths_and_hub_ids(tmp_path: Path) -> None:
    assert resolve_model(str(tmp_path)) == (str(tmp_path), tmp_path)
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")[1] is None  # a hub id
    for bad in ("./missing-dir", str(tmp_path / "absent.gguf"), "~/nothing/here"):
        with pytest.raises(ModelLoadError, match="does not exist"):
            resolve_model(bad)
