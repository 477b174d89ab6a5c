"""Running a notebook in a real Jupyter kernel on this interpreter (the example notebooks'
test and the quiet-load test)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

KERNEL_NAME = "trustmargin-test-python"


def execute_notebook(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 600) -> None:
    """Run every cell of ``nb`` in place (outputs are written into it).

    The kernel is an ipykernel on *this* interpreter (``sys.executable``), declared in a
    throw-away kernelspec, so a fresh CI machine needs no ``ipykernel install`` and the
    notebook can never pick up another Python that lacks this package.
    """
    with tempfile.TemporaryDirectory() as specs:
        spec_dir = Path(specs) / KERNEL_NAME
        spec_dir.mkdir()
        (spec_dir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "TrustMargin test kernel",
            "language": "python",
        }), encoding="utf-8")
        manager = KernelManager(kernel_name=KERNEL_NAME,
                                kernel_spec_manager=KernelSpecManager(kernel_dirs=[specs]))
        client = NotebookClient(nb, km=manager, timeout=timeout, allow_errors=False,
                                resources={"metadata": {"path": str(cwd)}})
        try:
            client.execute()
        finally:
            # A client given its kernel manager does not own it and leaves the kernel
            # running (about 1.2 GB each with the model loaded): stop it here.
            if manager.has_kernel:
                manager.shutdown_kernel(now=True)
