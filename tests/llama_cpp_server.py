"""A llama-cpp-python OpenAI-compatible server in a child process, for tests and benchmarks.

Not part of the library: production deployments run their own server (docs/scale_out.md).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from trustmargin_integrations.errors import BackendError, InvalidInputError

LAUNCHER = Path(__file__).with_name("llama_cpp_launch.py")
"""``llama_cpp.server`` with its per-token top-log-probability sort done by numpy (same answers)."""


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaCppServer:
    """A llama-cpp-python OpenAI-compatible server in a child process, bound to 127.0.0.1.

    Needs ``pip install 'llama-cpp-python[server]'`` (the ``remote`` extra). Used by the tests
    and the benchmark; for production, run the server yourself (see docs/scale_out.md).

    Args:
        model_path: the GGUF file to serve.
        alias: the model name clients send.
        n_ctx: context window; prompt log-probabilities need ``n_ctx * vocab * 4`` bytes.
        n_threads: CPU threads (default: all cores).
        logits_all: keep logits of every prompt token; without it the server cannot echo
            prompt log-probabilities.
        startup_timeout_s: how long to wait for the server to answer.
        extra_args: more command-line options of ``llama_cpp.server`` (e.g.
            ``["--rope_freq_base", "5000"]``: the same file served as another model).
        numpy_sort: start it through :data:`LAUNCHER`, which sorts each echoed token's
            log-probabilities with numpy instead of Python (the same answers, about 50 ms of
            CPU a token less: the tests' servers). Off, it is the server as installed, whose
            cost the benchmarks measure and docs/performance.md reports.

    Example:
        >>> with LlamaCppServer("model.gguf") as server:  # doctest: +SKIP
        ...     backend = OpenAICompatBackend(server.url, server.alias, "model.gguf")
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        alias: str = "local",
        port: int | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        logits_all: bool = True,
        startup_timeout_s: float = 120.0,
        extra_args: Sequence[str] = (),
        numpy_sort: bool = False,
    ) -> None:
        path = Path(model_path)
        if not path.is_file():
            raise InvalidInputError("model_path", f"{path} does not exist",
                                    "pass the path of a GGUF model file")
        self.model_path = path
        self.alias = alias
        self.port = port or free_local_port()
        self.n_ctx = n_ctx
        self.n_threads = n_threads or os.cpu_count() or 1
        self.logits_all = logits_all
        self.startup_timeout_s = startup_timeout_s
        self.extra_args = list(extra_args)
        self.numpy_sort = numpy_sort
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> str:
        """Start the server and wait until it answers ``GET /v1/models``; return its URL."""
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError as exc:
            raise BackendError("the llama.cpp server is not installed. Fix: pip install "
                               "'llama-cpp-python[server]' (or the 'remote' extra)") from exc
        # Closed in stop(); the file outlives this method by design.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        command = [
            sys.executable, *([str(LAUNCHER)] if self.numpy_sort else ["-m", "llama_cpp.server"]),
            "--model", str(self.model_path),
            "--model_alias", self.alias, "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            "--logits_all", "true" if self.logits_all else "false", "--verbose", "false",
            *self.extra_args,
        ]
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                log = self._log_tail()
                self.stop()
                raise BackendError(f"the llama.cpp server exited during startup: {log}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2.0).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise BackendError(f"the llama.cpp server did not answer within "
                           f"{self.startup_timeout_s:.0f} s")

    def _log_tail(self, chars: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", errors="replace")[-chars:]

    def stop(self) -> None:
        """Terminate the server (kill it if it does not exit within 10 s)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaCppServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
