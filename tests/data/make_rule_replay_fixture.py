"""Record decisions made by the code at 33b5a91 and their replays under other policies: the
fixture of tests/test_rule_replay.py. Run on a checkout of that commit:
``PYTHONPATH=CHECKOUT python tests/data/make_rule_replay_fixture.py OUT.json``."""
import json
import sys
from importlib.resources import files

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule import Policy

root = files("trustmargin_integrations").joinpath("demo_data")
questions = json.loads(root.joinpath("questions.json").read_text())[:10]
index = BM25Index.from_corpus(str(root.joinpath("corpus.json")))
inputs = []
for i, q in enumerate(questions):
    passages = [p for p in index.search(q["question"], k=3)] if i != 9 else []
    item = {"id": q["id"], "question": q["question"], "passages": passages}
    if i in (4, 5, 6, 7, 8):
        item["rag_candidates"] = {"gold": q["answers"][0], "other": "Paris", "blank": "  ",
                                  "again": q["answers"][0]} if i != 8 else [q["answers"][0], "1987"]
    inputs.append(item)
POLICIES = [Policy.paper(), Policy.fitted(0.3, -2.2), Policy.bind_only(-2.5),
            Policy.prior_only(-1.0), Policy.always_rag(), Policy.always_direct()]
GRID = [(lam, tau, v) for lam in (0.0, 0.5, 1.3) for tau in (-3.0, -1.5, 0.2)
        for v in ("full", "no_prior", "no_bind")]
tm = TrustMargin.from_pretrained("smollm2-135m", calibration=None)
out = []
for setting in [{}, {"policy": "bind_only", "tau": -2.0}, {"policy": "always_rag"},
                {"policy": "always_direct"}, {"lambda_bind": 0.3, "tau": -2.2}]:
    tm.config = TrustMarginConfig(**setting)
    for d in tm.arbitrate_batch(inputs):
        out.append({
            "setting": setting,
            "json": d.model_dump_json(),
            "replay": d.replay(),
            "replay_grid": [d.replay_winner(lam, tau, v) for lam, tau, v in GRID],
            "replay_policies": [d.replay_policy(p) for p in POLICIES],
            "answers_grid": [d.replay_answer(lam, tau, v) for lam, tau, v in GRID],
        })
with open(sys.argv[1], "w", encoding="utf-8") as file:
    json.dump({"grid": GRID, "policies": [{"kind": p.kind, "lambda_bind": p.lambda_bind,
                                            "tau": p.tau} for p in POLICIES],
               "records": out}, file, indent=0)
print(len(out))
