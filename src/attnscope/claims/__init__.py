"""The thesis-claims table: each qualitative claim of chapters 7.2.2, 8 and 9.1 against
this run's measurements, as an estimate with a 95 % confidence interval and a verdict from
the whole interval.

Verdicts: ``supported`` (the whole interval clears the supported bar), ``contradicted``
(it lies wholly on the other side of the contradicted bar; on a model other than the
thesis's Mistral-7B this reads *not replicated on <model>*), ``inconclusive`` (the
interval straddles a bar), ``not measured`` (the run lacks the variant or table the claim
needs). The bars are fixed in :class:`Thresholds` and printed in every row.

Intervals resample target words (:mod:`attnscope.stats`): the prompts of one target under
several shot seeds form one cluster. Weight claims resample layers. Each attention claim is
measured under every analysis choice of the maps (the thesis's: keys restricted to the
words and clues; full rows; full rows without the first token) and every layer band of
``claims.bands``; the table gives the verdict under the thesis's choice with the first
band and says whether the others agree (``robust``); the sensitivity table lists them all.
"""

from attnscope.claims.evaluation import evaluate, robustness, settings
from attnscope.claims.records import COLUMNS, SENSITIVITY_COLUMNS, Contrast, Setting, Thresholds
from attnscope.claims.registry import CLAIMS
from attnscope.claims.render import claims_html, claims_markdown, measured_on
from attnscope.claims.views import DEFAULT_BANDS, THESIS_CHOICE, pick_variant
from attnscope.verdicts import CLAIM_VERDICTS as VERDICTS
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, SUPPORTED

__all__ = [
    "CLAIMS",
    "COLUMNS",
    "CONTRADICTED",
    "DEFAULT_BANDS",
    "INCONCLUSIVE",
    "NOT_MEASURED",
    "SENSITIVITY_COLUMNS",
    "SUPPORTED",
    "THESIS_CHOICE",
    "VERDICTS",
    "Contrast",
    "Setting",
    "Thresholds",
    "claims_html",
    "claims_markdown",
    "evaluate",
    "measured_on",
    "pick_variant",
    "robustness",
    "settings",
]
