"""The plain reference scoring: one full forward pass per (prompt + continuation), the
semantics the fast tree-masked pass (:mod:`.tree`) is held to."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trustmargin_integrations.backends.base import ContinuationRequest, ContinuationScore
from trustmargin_integrations.backends.hf.loaded import LoadedModel


@torch.inference_mode()
def score_plain(loaded: LoadedModel,
                requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
    """Teacher-forced log-likelihood of each continuation, one forward pass per request."""
    out = []
    with loaded.lock:
        for req in requests:
            prompt = loaded.encode_prompt(req.prompt)
            answer = loaded.encode_answer(req.continuation)
            if not answer:
                out.append(ContinuationScore(0.0, 0))
                continue
            ids = torch.tensor([prompt + answer], device=loaded.device)
            logits = loaded.model(ids).logits[0, len(prompt) - 1:-1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            picked = logprobs.gather(1, torch.tensor(answer, device=loaded.device)[:, None])
            out.append(ContinuationScore(float(picked.sum()), len(answer)))
    return out
