"""CLeHe: entropy-based decoding for retrieval-augmented generation (Qiu et al., 2025).

One answer is decoded greedily and jointly over ``k + 1`` prompts (one per passage, plus the
question alone): each step takes ``argmax(log p_ens - beta * log q_L)`` over the plausible
tokens, where ``p_ens`` is the passages' distributions weighted by ``softmax(-H /
temperature)`` and ``q_L`` the highest-entropy intermediate layer of the question-only prompt
(from ``layer_start``); plausible means ``p_ens >= plausibility * max p_ens``
(``plausibility=0`` turns it off; why it is on: docs/decisions.md). With ``beta = 0`` and
one passage this is greedy decoding of that passage's prompt.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.pipelines.base import (
    BasePipeline,
    PipelineResult,
    PipelineStep,
    check_float,
    check_int,
    refs,
    register,
    require_token_decoder,
)
from trustmargin_integrations.prompts import view_texts
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.schema import Passage

if TYPE_CHECKING:  # torch is imported where it runs: a remote-only install imports this module
    import torch


@register
class CLeHePipeline(BasePipeline):
    """CLeHe entropy-based ensemble + contrastive decoding on a local transformers model.

    Args:
        backend: a :class:`~trustmargin_integrations.backends.base.TokenDecoder` such as
            :class:`~trustmargin_integrations.backends.hf.HFBackend` (the decoding reads
            next-token distributions and intermediate hidden states off the model).
        retriever: anything with ``search(query, k)``.
        k: passages retrieved, one decoding row each (the paper's BM25-RAG depth by default).
        temperature: temperature of the entropy weights, > 0 (0.25 by default; lower values
            concentrate the weight on the most confident passage).
        beta: weight of the contrast with the high-entropy layer, >= 0 (0.5 by default;
            0 turns the contrast off).
        layer_start: first candidate layer as a fraction of the depth, in [0, 1) (0.5: the
            upper half); the last layer is never a candidate.
        plausibility: only tokens with ``p_ens >= plausibility * max p_ens`` can be chosen,
            in [0, 1) (0.1 by default, as in contrastive decoding; 0: no constraint).
        max_new_tokens: most tokens of the answer.
        max_context_tokens: token budget of each passage prompt's context.
        trace_steps: decoding steps whose weights, entropies and layer are kept in the trace.
    """

    name = "clehe"

    def __init__(self, backend: Backend, retriever: Retriever, *, k: int = 20,
                 temperature: float = 0.25, beta: float = 0.5, layer_start: float = 0.5,
                 plausibility: float = 0.1, max_new_tokens: int = 32,
                 max_context_tokens: int = 2048, trace_steps: int = 32) -> None:
        super().__init__(backend, retriever)
        self.hf = require_token_decoder(backend, "clehe", "the next-token distributions and the "
                             "intermediate hidden states")
        self.k = check_int("k", k, 1)
        self.temperature = check_float("temperature", temperature, 0.0, None)
        self.beta = check_float("beta", beta, 0.0, None, low_open=False)
        self.layer_start = check_float("layer_start", layer_start, 0.0, 1.0, low_open=False)
        self.plausibility = check_float("plausibility", plausibility, 0.0, 1.0, low_open=False)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
        self.max_context_tokens = check_int("max_context_tokens", max_context_tokens, 16)
        self.trace_steps = check_int("trace_steps", trace_steps, 0)
        model = self.hf.model
        self.num_layers = int(model.config.num_hidden_layers)
        # hidden_states[i] is the output of layer i (0: the embeddings); the last entry is the
        # final layer after the final norm, which is excluded.
        first = max(1, math.floor(self.layer_start * self.num_layers))
        self.layers = list(range(first, self.num_layers))
        self.norm = getattr(model.base_model, "norm", None)
        self.head = model.get_output_embeddings()
        if not self.layers:
            raise InvalidInputError("layer_start", f"leaves no intermediate layer of the "
                                    f"{self.num_layers}-layer model", "lower layer_start")
        if self.norm is None or self.head is None:
            raise InvalidInputError("backend", f"{type(model).__name__} has no final norm "
                                    "(base_model.norm) or no output embeddings to read "
                                    "intermediate layers through",
                                    "use a decoder-only model such as Llama, Qwen or SmolLM")

    def params(self) -> dict[str, Any]:
        """Every parameter in force."""
        return {"k": self.k, "temperature": self.temperature, "beta": self.beta,
                "layer_start": self.layer_start, "candidate_layers": self.layers,
                "plausibility": self.plausibility,
                "max_new_tokens": self.max_new_tokens,
                "max_context_tokens": self.max_context_tokens, "trace_steps": self.trace_steps}

    def _run_chunk(self, questions: list[str]) -> list[PipelineResult]:
        return [self._run_one(q) for q in questions]

    def _run_one(self, question: str) -> PipelineResult:
        start = time.perf_counter()
        hits = self._search([question], self.k)[0]
        steps = [PipelineStep("retrieve", query=question, passages=refs(hits))]
        hf = self.hf
        question_only = hf.render_prompt(view_texts(question, "").question_only)
        if not hits:
            # Nothing to ensemble: greedy closed-book decoding, said so in the trace.
            raw = hf.generate([question_only], self.max_new_tokens, stop=answer_complete)[0]
            steps.append(PipelineStep("decide", extra={"reason": "no passage retrieved: "
                                                       "closed-book greedy decoding"}))
            steps.append(PipelineStep("generate", text=raw))
            return self._result(question, raw, steps, [], False, time.perf_counter() - start)
        rows: list[Passage] = []
        prompts: list[list[int]] = []
        for passage in hits:
            prompt, used = self._prompt_over_fitting(question, [passage], self.max_new_tokens)
            rows.extend(used)
            prompts.append(hf.encode_prompt(prompt))
        ids, records, stop = self.decode(prompts, hf.encode_prompt(question_only))
        answer = hf.decode_tokens(ids)
        steps.append(PipelineStep("decode", text=answer, passages=refs(rows), extra={
            "stop": stop, "tokens": len(ids), "trace": records,
            "trace_truncated": len(ids) + (stop == "eos") > len(records)}))
        return self._result(question, answer, steps, rows, True, time.perf_counter() - start)

    def decode(self, documents: list[list[int]],
               question_only: list[int]) -> tuple[list[int], list[dict[str, Any]], str]:
        """Joint greedy decoding over passage prompts and the question-only prompt.

        Args:
            documents: token ids of each passage prompt (rendered).
            question_only: token ids of the question-only prompt (rendered).

        Returns:
            The generated token ids, the per-step records (the first ``trace_steps``: token,
            weights, entropies, chosen layer) and the stop reason (``"eos"``, ``"line"``,
            ``"limit"``).
        """
        import torch

        with torch.inference_mode():
            return self._decode(documents, question_only)

    def _decode(self, documents: list[list[int]],
                question_only: list[int]) -> tuple[list[int], list[dict[str, Any]], str]:
        hf = self.hf
        # Passage rows: one left-padded batch with its own KV cache. The question-only row
        # runs apart: only it needs the hidden states of every layer.
        passages = hf.prefill(documents)
        question = hf.prefill([question_only], hidden_states=True)
        generated: list[int] = []
        records: list[dict[str, Any]] = []
        stop = "limit"
        for step in range(self.max_new_tokens):
            token, record = self._step(passages.logits, question.hidden_states)
            if step < self.trace_steps:
                records.append({**record, "piece": hf.decode_tokens([token])})
            if token in hf.eos_token_ids:
                stop = "eos"
                break
            generated.append(token)
            if hf.stop_holds(answer_complete, generated):
                stop = "line"
                break
            if step == self.max_new_tokens - 1:
                break
            hf.step(passages, [token] * len(documents))
            hf.step(question, [token], hidden_states=True)
        return generated, records, stop

    def _step(self, doc_logits: torch.Tensor,
              q_hidden: tuple[torch.Tensor, ...]) -> tuple[int, dict[str, Any]]:
        """The next token from the passage rows' logits and the question row's hidden states."""
        import torch

        logp = torch.log_softmax(doc_logits.float(), dim=-1)             # (k, V)
        entropy = -(logp.exp() * logp).sum(-1)                          # (k,)
        weights = torch.softmax(-entropy / self.temperature, dim=0)     # (k,)
        # log sum_j w_j p_j, computed in log space (a one-row ensemble is exactly log p_1).
        log_ens = torch.logsumexp(torch.log(weights)[:, None] + logp, dim=0)
        states = torch.stack([q_hidden[i][0, -1] for i in self.layers])  # (L, hidden)
        layer_logp = torch.log_softmax(self.head(self.norm(states)).float(), dim=-1)
        layer_entropy = -(layer_logp.exp() * layer_logp).sum(-1)        # (L,)
        chosen = int(layer_entropy.argmax())
        # beta = 0 uses the ensemble alone (no 0 * log q term that could change the argmax).
        score = log_ens if self.beta == 0 else log_ens - self.beta * layer_logp[chosen]
        if self.plausibility > 0:
            # The ensemble's own argmax always passes, so beta = 0 is still plain argmax.
            floor = log_ens.max() + math.log(self.plausibility)
            score = score.masked_fill(log_ens < floor, float("-inf"))
        token = int(score.argmax())
        return token, {"token": token, "weights": weights.tolist(),
                       "entropies": entropy.tolist(), "layer": self.layers[chosen],
                       "layer_entropy": float(layer_entropy[chosen])}
