"""TrustMargin, the arbiter: the whole per-question pipeline, split by stage.

    answer_batch:    questions --retrieve_batch--> passages --arbitrate_batch--> Decisions
    arbitrate_batch: validate -> context and prompt views (preparation.py)
                     -> generate and clean missing candidates (candidates.py)
                     -> settle or score six likelihoods (plan.py)
                     -> margins -> rule -> Decision (decision.py)

The backend only generates and scores; every decision about what to do is made here.
"""

from trustmargin_integrations.arbiter.core import TrustMargin
from trustmargin_integrations.arbiter.decision import Evidence
from trustmargin_integrations.arbiter.preparation import PreparedQuestion

__all__ = ["Evidence", "PreparedQuestion", "TrustMargin"]
