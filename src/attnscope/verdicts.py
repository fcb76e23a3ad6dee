"""The verdict words of every table that judges a thesis statement, in one place.

Three tables judge the thesis, and their words differ because what they judge differs:

- **Theory checks** (:mod:`attnscope.theory`) compare a Monte-Carlo estimate with a
  formula at a stated tolerance, so a row either holds or fails; the word also says which
  formula was tested (the thesis's own, its correction, or an extension the thesis does
  not state), because the table keeps a failed thesis formula next to its corrected one.
- **Claims** (:mod:`attnscope.claims`) judge a statement about trained models on one run's
  measurements against two bars, so a value between the bars is *inconclusive*, a claim
  the run has no data for is *not measured*, and a claim about the thesis's model that another
  model contradicts is *not replicated on <model>* there (across models, a contradicted kind).
- **Spectra observations** (:mod:`attnscope.spectra`) record two booleans per statement
  (does the learned/random ratio meet the criterion, is it in the thesis's range), stored
  as nullable booleans and written ``yes``/``no`` (``–`` where there is no value).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

THEORY_VERDICTS = {
    "thesis": ("holds", "fails"),
    "corrected": ("holds after correction", "corrected formula fails"),
    "extension": ("holds (extension)", "fails (extension)"),
}
"""Theory-check kind → (verdict when the estimate is within tolerance, verdict when not)."""

SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED = (
    "supported",
    "contradicted",
    "inconclusive",
    "not measured",
)
CLAIM_VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED)
NOT_REPLICATED = "not replicated on"
"""The contradicted verdict of a claim about the thesis's model on another model, whose name follows."""


def not_replicated_on(model: str) -> str:
    """The contradicted verdict on ``model``, a model other than the thesis's."""
    return f"{NOT_REPLICATED} {model}"


def verdict_kind(verdict: str) -> str:
    """The verdict without its model: ``not replicated on <model>`` is ``contradicted``."""
    return CONTRADICTED if verdict.startswith(f"{NOT_REPLICATED} ") else verdict


def yes_no(value: Any) -> str:
    """A spectra observation's boolean as written in its Markdown table (``–`` for NA)."""
    return "–" if pd.isna(value) else ("yes" if value else "no")
