"""TrustMargin, the arbiter: the whole per-question pipeline, split by stage.

    answer_batch:    questions --retrieve_batch--> passages --arbitrate_batch--> Decisions
    arbitrate_batch: validate -> context within the token budget -> three prompt views
                     (preparation.py)
                     -> (per batch, one model session; core.py: score_batch)
                        generate missing candidates -> clean (candidates.py)
                        -> settle or score six likelihoods (plan.py): Evidence
                     -> the call's policy: margins -> rule -> Decision (decision.py;
                        core.py: decide, no model)

The backend is asked only to generate and to score; every decision about what to generate,
what to score and how to decide is made here. The stages lean on the layer below:
validation (:mod:`~trustmargin_integrations.validation`), context
(:mod:`~trustmargin_integrations.context`), prompts, cleaning
(:mod:`~trustmargin_integrations.answers`), the rule (:mod:`~trustmargin_integrations.rule`)
and the record (:mod:`~trustmargin_integrations.schema`).
"""

from trustmargin_integrations.arbiter.core import TrustMargin
from trustmargin_integrations.arbiter.decision import Evidence
from trustmargin_integrations.arbiter.preparation import PreparedQuestion

__all__ = ["Evidence", "PreparedQuestion", "TrustMargin"]
