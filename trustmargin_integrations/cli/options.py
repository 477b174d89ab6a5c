"""The options several commands share, typed once."""

from __future__ import annotations

from typing import Annotated

import typer

from trustmargin_integrations.policy_file import OBJECTIVES

BackendOpt = Annotated[list[str] | None, typer.Option(
    "--backend",
    help="The engine and model: hf:MODEL (or a bare model name) runs it here, "
         "openai:URL#MODEL scores on an OpenAI-compatible server (vLLM, llama.cpp) serving "
         "MODEL. Repeat for several servers of one model. Default: hf:smollm2-135m.")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", "-m",
    help="Shorthand of --backend hf:MODEL: a named model (smollm2-135m, qwen2.5-1.5b), a "
         "local directory, a .gguf file or a Hugging Face id (with --remote-url: the "
         "server's tokenizer).")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ... (default: auto).")]
DtypeOpt = Annotated[str | None, typer.Option(
    help="float32, bfloat16 or float16 (default: fp32 on CPU, bf16/fp16 on GPU).")]
TopKOpt = Annotated[int, typer.Option("--top-k", "-k", min=1, help="Passages to retrieve.")]
PromptsOpt = Annotated[bool, typer.Option(
    "--include-prompts/--no-include-prompts",
    help="Attach the exact rendered prompt of each view to every decision.")]
RemoteUrlOpt = Annotated[str | None, typer.Option(
    "--remote-url",
    help="Shorthand of --backend openai:URL#MODEL: score and generate on an OpenAI-compatible "
         "server instead of loading the model here; --model then names its tokenizer (HF id "
         "or directory).")]
RemoteModelOpt = Annotated[str | None, typer.Option(
    "--remote-model", help="The model name the server serves (default: --model).")]
ConcurrencyOpt = Annotated[int | None, typer.Option(
    min=1, help="Requests in flight to each server (default 8; servers only).")]
TauOpt = Annotated[float | None, typer.Option(
    "--tau", help="Decision threshold: RAG iff M > tau (default: the paper's -1.5).")]
LambdaOpt = Annotated[float | None, typer.Option(
    "--lambda-bind", help="Weight of the binding margin (default: the paper's 0.5).")]
CalibrationOpt = Annotated[str | None, typer.Option(
    "--calibration", help="A policy file from `trustmargin check` or `trustmargin calibrate`, "
    "or 'shipped' for the one shipped with a named model: its policy (and the numbers that "
    "policy takes) replaces the paper's rule.")]
EsUrlOpt = Annotated[str | None, typer.Option(
    "--elasticsearch", help="Elasticsearch URL (credentials: TRUSTMARGIN_ES_* variables).")]
EsIndexOpt = Annotated[str, typer.Option("--es-index", help="Elasticsearch index name.")]


# A choice listed in --help, checked by the command (check_objective): a click Choice would
# refuse a bad value with click's own box, not the one typed line naming the fix that every
# other bad option gets.
ObjectiveOpt = Annotated[str, typer.Option(
    "--objective", metavar="[" + "|".join(OBJECTIVES) + "]",
    help="The grade to maximize: f1 (token F1, the paper's; for short answers), em "
         "(exact match), or contains (a gold answer stated in the text, normalized, as whole "
         "words; for chat or long-form answers, whose F1 their length dilutes and whose EM is "
         "about 0).")]
