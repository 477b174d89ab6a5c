"""The modules a piece of code loads, measured in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fresh_modules(code: str) -> set[str]:
    """The modules loaded by ``code`` in a fresh interpreter (this worktree first on the
    path, so the checkout under test is the one imported)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))
