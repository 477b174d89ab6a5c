"""The files of a run directory that no other command may write, and the output guard that
protects them (:func:`guard_output`): below the evaluation layer, so the commands a user runs
(``score``, ``index``, ``demo``) guard their outputs without loading it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import check_output

CACHE_FILE = "cache.jsonl"
MANIFEST_FILE = "manifest.json"


def inside_run(run_dir: str | Path, name: str) -> Path:
    """``run_dir / name``, refused when a symbolic link (or ``..``) leads it outside the run.

    Everything ``eval``, ``report`` and ``calibrate`` read or write in a run directory goes
    through here, so a link planted in it cannot make them touch a file elsewhere.

    Raises:
        InvalidInputError: naming the path and the fix.
    """
    root = Path(run_dir)
    path = root / name
    real_root, real_path = root.resolve(), path.resolve()
    if real_path != real_root and real_root not in real_path.parents:
        raise InvalidInputError("run_dir", f"{path} leads outside the run directory {root} "
                                f"(to {real_path})", "remove the symbolic link from the run "
                                "directory; a run keeps its own files")
    return path


def run_files(run_dir: str | Path) -> dict[Path, str]:
    """The files of a run directory that only ``trustmargin eval`` writes (path -> what it
    is): no other command may write over them (see
    :func:`~trustmargin_integrations.files.check_output`)."""
    root = Path(run_dir)
    return {root / CACHE_FILE: f"the result cache of the run {root}",
            root / MANIFEST_FILE: f"the manifest of the run {root}"}


def run_files_beside(path: str | Path) -> dict[Path, str]:
    """:func:`run_files` of the folder holding ``path`` when that folder is a run directory
    (it holds both a manifest and a result cache), else nothing."""
    folder = Path(path).parent
    if (folder / CACHE_FILE).is_file() and (folder / MANIFEST_FILE).is_file():
        return run_files(folder)
    return {}


def guard_output(path: Path, option: str, *, inputs: Mapping[str, Path | None] | None = None,
                 run_dir: Path | None = None,
                 protected: Mapping[Path, str] | None = None) -> Path:
    """The output guard (:func:`~trustmargin_integrations.files.check_output`) with the run
    directories protected: the files of ``run_dir`` (the run the command reads or fills) and
    of any run directory ``path`` lies in are never written by another command.

    Args:
        path: the file the command will write.
        option: the option that named it (``--out``), for the error.
        inputs: the files the command reads (option -> path; None entries skipped).
        run_dir: the run directory the command reads or fills, if any.
        protected: further files the command must not write (path -> what it is).
    """
    owned = {**run_files_beside(path), **(run_files(run_dir) if run_dir else {}),
             **(protected or {})}
    return check_output(path, option, protected=owned,
                        inputs={k: v for k, v in (inputs or {}).items() if v is not None})
