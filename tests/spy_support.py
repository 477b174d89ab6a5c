"""A spy on the real backend: every model call (generation, scoring) recorded, then run."""

from __future__ import annotations

from typing import Any

from trustmargin_integrations.backends.hf import HFBackend


class CallSpy:
    """The real backend, with every generate and score call recorded (prompts per call,
    requests per call); everything else passes through."""

    def __init__(self, backend: HFBackend) -> None:
        self._backend = backend
        self.generated: list[list[str]] = []
        self.scored: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate(self, prompts: list[str], *args: Any, **kwargs: Any) -> list[str]:
        self.generated.append(list(prompts))
        return self._backend.generate(prompts, *args, **kwargs)

    def score_continuations(self, requests: Any) -> Any:
        self.scored.append(len(requests))
        return self._backend.score_continuations(requests)

    def session(self) -> Any:
        spy = self

        class _Session:
            def __enter__(self) -> Any:
                self.scope = spy._backend.session()
                self.inner = self.scope.__enter__()
                return self

            def __exit__(self, *exc: Any) -> None:
                self.scope.__exit__(*exc)

            def generate(self, prompts: list[str], *args: Any, **kwargs: Any) -> list[str]:
                spy.generated.append(list(prompts))
                return self.inner.generate(prompts, *args, **kwargs)

            def score(self, requests: Any) -> Any:
                spy.scored.append(len(requests))
                return self.inner.score(requests)

        return _Session()

    @property
    def calls(self) -> int:
        return len(self.generated) + len(self.scored)
