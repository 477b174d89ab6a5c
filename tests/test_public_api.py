"""Every package's public names (``__all__``), pinned: adding, removing or renaming one is a
deliberate API change made here too, not a side effect of an edit elsewhere."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import trustmargin_integrations

ROOT_LIMIT = 15
"""The most names the root package exports: a small surface on purpose."""

PINNED = {
    "trustmargin_integrations": [  # at most 15: what a user of the plug-in calls
        "BM25Index", "BackendError", "Decision", "InvalidInputError", "Margins", "ModelLoadError",
        "Passage", "Policy", "Retriever", "TrustMargin", "TrustMarginConfig", "TrustMarginError",
        "Verdict", "check_chain",
    ],
    "trustmargin_integrations.arbiter": [
        "Evidence", "PreparedQuestion", "TrustMargin",
    ],
    "trustmargin_integrations.backends": [
        "Backend", "Capabilities", "ContinuationRequest", "ContinuationScore", "EngineDefaults",
        "ModelSession", "PlainSession", "StopPredicate", "TokenDecoder", "plain_session",
    ],
    "trustmargin_integrations.backends.hf": [
        "CachedPrompts", "DecodingBatch", "GreedyOutput", "HFBackend", "HFSession", "LoadedModel",
        "Stem", "TokenDecoding", "common_prefix_length", "pick_device", "pick_dtype",
    ],
    "trustmargin_integrations.backends.openai_compat": [
        "ENV_API_KEY", "ENV_MODEL", "ENV_PREFIX", "ENV_URL", "LOGPROB_TOLERANCE",
        "MAX_RESPONSE_BYTES", "OpenAICompatBackend", "RETRY_STATUS", "RemoteVariables",
        "load_tokenizer", "redact_url",
    ],
    "trustmargin_integrations.cli": [
        "app", "main",
    ],
    "trustmargin_integrations.evaluation": [
        "EvalExample", "EvalRecord", "PrecomputedPassages", "ResultStore", "RetrieverPassages",
        "cache_key", "exact_match", "load_dataset", "run_eval", "run_noise", "token_f1",
    ],
    "trustmargin_integrations.evaluation.report": [
        "build_report", "inside", "intervals",
    ],
    "trustmargin_integrations.langchain": [
        "CORRECTION_EVENT", "DECISION_EVENT", "LocalChatModel", "LocalLLM", "MARGINS_EVENT",
        "PIPELINES_KEY", "PIPELINE_EVENT", "PIPELINE_KEY", "PipelineRetriever", "PipelineRunnable",
        "SHADOW_EVENT", "SIDE_RUN_NAMES", "SIDE_TAGS", "TrustMarginChain", "TrustMarginInput",
        "TrustMarginRetriever", "TrustMarginRouter", "TrustMarginState", "build_pipeline_chain",
        "build_trustmargin_chain", "describe_decision", "document_to_passage",
        "passage_to_document", "trustmargin_node", "with_trustmargin",
    ],
    "trustmargin_integrations.llama_index": [
        "CLOSED_BOOK_PROMPT_KEY", "DecisionRecord", "EVIDENCE_MODES", "LocalLlamaIndexLLM",
        "LocalQuestionGenerator", "METADATA_KEY", "PIPELINE_METADATA_KEY", "PassageRetriever",
        "PipelineQueryEngine", "SOURCES_KEY", "SearchOrDoneOutputParser", "SearchTagOutputParser",
        "TrustMarginArbiter", "TrustMarginChatCorrectionEvent", "TrustMarginChatEngine",
        "TrustMarginDecisionEvent", "TrustMarginQueryEngine", "TrustMarginRetrieverQueryEngine",
        "build_flare_engine", "node_to_passage", "passage_to_node",
    ],
    "trustmargin_integrations.pipelines": [
        "CLeHePipeline", "DTRPipeline", "FLAREPipeline", "IRCoTPipeline", "PIPELINES", "Pipeline",
        "PipelineResult", "PipelineStep", "build_pipeline", "rrf_merge",
    ],
    "trustmargin_integrations.retrieval": [
        "BM25Index", "Retriever", "load_corpus",
    ],
    "trustmargin_integrations.retrieval.elasticsearch": [
        "DEFAULT_INDEX", "DPR_HEADER", "ENV_API_KEY", "ENV_CA_CERT", "ENV_INDEX", "ENV_PASSWORD",
        "ENV_PREFIX", "ENV_URL", "ENV_USER", "ElasticsearchRetrievalError",
        "ElasticsearchRetriever", "ElasticsearchSettings", "ElasticsearchVariables", "IndexReport",
        "TITLE_BOOST", "bulk_actions", "connect", "hit_to_passage", "index_body", "index_command",
        "iter_dpr_tsv", "read_corpus", "search_body",
    ],
    "trustmargin_integrations.rule": [
        "AlwaysDirect", "AlwaysRag", "BindOnly", "HasMargins", "MarginPair", "Margins",
        "PAPER_LAMBDA_BIND", "PAPER_TAU", "POLICIES", "Policy", "PolicyName", "PolicyRecord",
        "PolicyVerdict", "PriorOnly", "Rule", "SETTLED", "ThreeViews", "Verdict", "WeightedBind",
        "apply_policy", "compute_margins", "exceeds", "known_policy_name", "settle",
        "settle_among",
    ],
}


@pytest.mark.parametrize("package", sorted(PINNED))
def test_public_names_are_pinned(package: str) -> None:
    needs = {"langchain": "langchain_core", "llama_index": "llama_index.core",
             "elasticsearch": "elasticsearch", "hf": "torch", "openai_compat": "httpx"}
    pytest.importorskip(needs.get(package.rsplit(".", 1)[-1], "pydantic"))
    module = importlib.import_module(package)
    assert sorted(module.__all__) == PINNED[package]
    assert len(set(module.__all__)) == len(module.__all__)


def test_every_package_is_pinned() -> None:
    """A new package (a folder with an ``__init__``) gets its surface pinned here too."""
    root = Path(trustmargin_integrations.__file__).parent
    packages = {".".join(("trustmargin_integrations", *init.parent.relative_to(root).parts))
                for init in root.rglob("__init__.py")}
    assert packages == set(PINNED)


def test_the_root_surface_is_small() -> None:
    assert len(PINNED["trustmargin_integrations"]) <= ROOT_LIMIT


@pytest.mark.parametrize("name", ["decide", "decide_among", "LEGACY_NAMES", "Choice",
                                  "DecisionPolicy", "DecisionReason", "Variant"])
def test_removed_names_stay_removed(name: str) -> None:
    """One name per concept: the shims and second names of 0.1.0 are gone everywhere."""
    for package in ("trustmargin_integrations", "trustmargin_integrations.rule",
                    "trustmargin_integrations.rule.replay", "trustmargin_integrations.config",
                    "trustmargin_integrations.schema", "trustmargin_integrations.vocabulary"):
        assert not hasattr(importlib.import_module(package), name), (package, name)
