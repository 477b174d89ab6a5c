"""The one crash-safe writer: whole replacement, links refused, failures leave the old file,
other processes' temporary files left alone, two real processes on one destination, and a real
full disk (a small tmpfs in a private mount namespace)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import (
    TEMP_MARK,
    TEMP_SUFFIX,
    atomic_output,
    open_append,
    remove_stale_temps,
    temp_path,
    write_bytes_atomic,
    write_text_atomic,
)

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if TEMP_MARK in p.name)


def test_replaces_whole_with_a_normal_file_mode(tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "out.txt"
    assert write_text_atomic(dest, "first\n") == dest  # the parent folder is created
    write_bytes_atomic(dest, b"second\n")
    assert dest.read_bytes() == b"second\n"
    # The mode a plain open() would give, not mkstemp's private 0600.
    assert stat.S_IMODE(dest.stat().st_mode) == 0o666 & ~_umask()
    assert _leftovers(dest.parent) == []


def test_links_and_directories_are_refused_and_nothing_is_written_through(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    link = run / "report.md"
    link.symlink_to(outside)
    for write in (lambda: write_text_atomic(link, "evil"), lambda: open_append(link)):
        with pytest.raises(InvalidInputError) as err:
            write()
        assert err.value.field == str(link) and "symbolic link" in err.value.problem
    assert outside.read_text(encoding="utf-8") == "keep" and link.is_symlink()
    with pytest.raises(InvalidInputError, match="is a directory"):
        write_text_atomic(run, "x")
    assert _leftovers(run) == []


def test_a_write_failing_mid_way_leaves_the_previous_file(tmp_path: Path) -> None:
    """A simulated full disk: the block raises ENOSPC after half of the new content."""
    dest = tmp_path / "out.jsonl"
    write_text_atomic(dest, "old complete content\n")
    with pytest.raises(OSError) as err, atomic_output(dest) as handle:
        handle.write("new half\n" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")
    assert err.value.errno == errno.ENOSPC
    assert dest.read_text(encoding="utf-8") == "old complete content\n"
    assert _leftovers(tmp_path) == []


FULL_DISK_CHILD = textwrap.dedent("""
    import errno, json, sys
    from pathlib import Path
    from trustmargin_integrations.files import write_text_atomic
    dest = Path(sys.argv[1]) / "calibration.json"
    write_text_atomic(dest, "previous\\n")
    try:
        write_text_atomic(dest, "x" * (1 << 20))  # 1 MiB on a 256 KiB disk
        outcome = "written"
    except OSError as exc:
        outcome = errno.errorcode.get(exc.errno, str(exc.errno))
    print(json.dumps({"outcome": outcome, "dest": dest.read_text(),
                      "files": sorted(p.name for p in dest.parent.iterdir())}))
""")


def test_a_real_full_disk_leaves_the_previous_file(tmp_path: Path) -> None:
    """A 256 KiB tmpfs mounted in a private mount namespace (``unshare``), so the real kernel
    reports ENOSPC at the writer's flush; the mount disappears with the child process."""
    disk = tmp_path / "disk"
    disk.mkdir()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs util-linux `unshare` to mount a private tmpfs")
    script = (f"mount -t tmpfs -o size=256k tmpfs {disk} || exit 77; "
              f"exec {sys.executable} -c \"$CHILD\" {disk}")
    done = subprocess.run([unshare, "-rm", "sh", "-c", script], env={**ENV, "CHILD":
                          FULL_DISK_CHILD}, capture_output=True, text=True, timeout=120)
    if done.returncode == 77 or "unshare failed" in done.stderr:
        pytest.skip(f"cannot mount a tmpfs here (no user namespaces?): {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"outcome": "ENOSPC", "dest": "previous\n", "files": ["calibration.json"]}


def test_only_temps_of_dead_writers_on_this_host_are_removed(tmp_path: Path) -> None:
    dest = tmp_path / "out.jsonl"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        host = temp_path(dest).name.split(TEMP_MARK)[1].rsplit("-", 2)[0]
        names = {
            "live": f"out.jsonl{TEMP_MARK}{host}-{live.pid}-aa{TEMP_SUFFIX}",
            "dead": f"out.jsonl{TEMP_MARK}{host}-{dead.pid}-bb{TEMP_SUFFIX}",
            "other host": f"out.jsonl{TEMP_MARK}elsewhere-{dead.pid}-cc{TEMP_SUFFIX}",
            "other file": f"in.jsonl{TEMP_MARK}{host}-{dead.pid}-dd{TEMP_SUFFIX}",
        }
        for name in names.values():
            (tmp_path / name).write_text("in flight", encoding="utf-8")
        write_text_atomic(dest, "done\n")  # cleans up before it writes
        assert _leftovers(tmp_path) == sorted(
            names[k] for k in ("live", "other host", "other file"))
        assert remove_stale_temps(dest) == []
    finally:
        live.kill()
        live.wait()


CONCURRENT_CHILD = textwrap.dedent("""
    import sys
    from trustmargin_integrations.files import write_text_atomic
    dest, mark = sys.argv[1], sys.argv[2]
    for round in range(40):
        write_text_atomic(dest, (mark * 4095 + "\\n") * 256)  # 1 MiB per write
""")


def test_two_processes_replacing_one_file_never_break_each_other(tmp_path: Path) -> None:
    """Two real processes replace one destination 40 times each, at the same time: neither
    fails (each keeps its own temp file) and the result is one writer's whole content."""
    dest = tmp_path / "out.jsonl"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_CHILD, str(dest), mark],
                              env=ENV, stderr=subprocess.PIPE, text=True) for mark in "ab"]
    errors = [proc.communicate(timeout=300)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    text = dest.read_text(encoding="utf-8")
    assert text in {(mark * 4095 + "\n") * 256 for mark in "ab"}
    assert _leftovers(tmp_path) == []
