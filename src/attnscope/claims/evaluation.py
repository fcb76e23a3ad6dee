"""The claims table of one model: every claim under every analysis setting, the headline
(the first setting) with its robustness across the others, and the sensitivity table."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from attnscope.claims.records import (
    COLUMNS,
    DEFAULT_THRESHOLDS,
    SENSITIVITY_COLUMNS,
    Claim,
    Contrast,
    Result,
    Setting,
    Thresholds,
)
from attnscope.claims.registry import CLAIMS
from attnscope.claims.views import DEFAULT_BANDS, THESIS_CHOICE, band_name, built_once
from attnscope.evidence import Evidence
from attnscope.matrices import MATRIX_FORMS
from attnscope.store import VALUE_WEIGHTED
from attnscope.verdicts import CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, SUPPORTED, not_replicated_on


def settings(claim: Claim, ev: Evidence, bands: Sequence[str | int]) -> list[Setting]:
    """The settings ``claim`` is measured under; the first reads the maps its sentence describes (the
    headline: :attr:`Claim.reads`)."""
    reads = claim.reads or THESIS_CHOICE
    present = list(dict.fromkeys(ev.choices["choice"])) if "choice" in ev.choices else []
    choices = sorted(present, key=lambda c: c != reads) or [reads]
    options = {
        "choice": choices,
        "band": list(bands),
        "form": list(MATRIX_FORMS),
        "scale_free": [False, True],
        "null": ["formula", "init seeds"],
    }
    weights = [
        Setting(**dict(zip(claim.varies, values)))
        for values in itertools.product(*(options[name] for name in claim.varies))
    ]
    if "choice" not in claim.varies or ev.value_choices.empty:
        return weights
    return weights + [replace(setting, weighting=VALUE_WEIGHTED) for setting in weights]


def _verdict_on(ev: Evidence, verdict: str) -> str:
    """A contradicted claim about Mistral-7B is *not replicated* on another model."""
    return verdict if ev.thesis_model or verdict != CONTRADICTED else not_replicated_on(ev.model)


@dataclass
class _Row:
    claim: Claim
    statement: str
    results: dict[Setting, Result] = field(default_factory=dict)


def given(ev: Evidence, result: Result, premise: Result | None, statement: str) -> Result:
    """``result`` of a claim that presupposes another (``premise``, whose ``statement`` it is) under
    the same setting: a conjunction. Without its premise supported a claim is not supported: a
    contradicted premise contradicts it (*not replicated* on another model), an inconclusive or
    unmeasured one leaves it inconclusive at best; the measured text says which premise failed."""
    verdict = NOT_MEASURED if premise is None else premise.verdict
    if result.verdict == NOT_MEASURED or verdict == SUPPORTED:
        return result
    if verdict == CONTRADICTED:
        combined = CONTRADICTED
    else:
        combined = INCONCLUSIVE if result.verdict == SUPPORTED else result.verdict
    shown = "–" if premise is None or verdict == NOT_MEASURED else str(premise.interval)
    outcome = "replicated" if combined == CONTRADICTED else "supported"
    measured = (
        f"premise not met ({statement}: {_verdict_on(ev, verdict)}, {shown}), so this claim is not "
        f"{outcome} whatever its own step; {result.measured}"
    )
    return replace(result, verdict=combined, measured=measured)


def _measure_all(
    ev: Evidence, th: Thresholds, bands: Sequence[str | int], only: Collection[str] | None = None
) -> list[_Row]:
    rows: dict[tuple[str, str], _Row] = {}
    wanted = None if only is None else {*only, *(c.premise for c in CLAIMS if c.claim in only and c.premise)}
    with built_once():
        for claim in CLAIMS if wanted is None else [c for c in CLAIMS if c.claim in wanted]:
            for setting in settings(claim, ev, bands):
                measured = claim.measure(ev.weighted(setting.weighting), th, setting)
                results = measured if isinstance(measured, list) else [(claim.statement, measured)]
                for statement, result in results:
                    row = rows.setdefault((claim.claim, statement), _Row(claim, statement))
                    if result is not None:
                        row.results[setting] = result
    by_claim = {row.claim.claim: row for row in rows.values()}
    for row in rows.values():
        if row.claim.premise is not None:
            premise = by_claim[row.claim.premise]
            row.results = {
                s: given(ev, r, premise.results.get(s), premise.statement) for s, r in row.results.items()
            }
    return [row for row in rows.values() if only is None or row.claim.claim in only]


COVERS = {"choice": "choices", "band": "bands", "form": "forms", "scale_free": "scale-free", "null": "nulls"}
"""How the robust column names what the other settings of a claim vary."""


def robustness(ev: Evidence, results: Mapping[Setting, Result]) -> str:
    """``yes`` when every other measured setting's verdict agrees with the first's, else the
    ones that differ (``–`` with nothing to compare: one setting, or none measured); either way
    with what the agreement covers: the settings varied and the draws (shot or init seeds)."""
    (first, headline), *others = results.items()
    measured = [(s, r) for s, r in others if r.verdict != NOT_MEASURED and s.weighting == first.weighting]
    if not measured or headline.verdict == NOT_MEASURED:
        return "–"
    varied = [
        name
        for field_name, name in COVERS.items()
        if len({getattr(s, field_name) for s, _ in [(first, headline), *measured]}) > 1
    ]
    draws = f"{headline.n_seeds} {headline.draws or ('shot draw' if headline.per_prompt else 'init seed')}"
    covers = ", ".join(varied) + f"; {draws}{'s' if headline.n_seeds != 1 else ''}"
    differ = [
        f"{s.label()}: {_verdict_on(ev, r.verdict)}" for s, r in measured if r.verdict != headline.verdict
    ]
    return f"yes ({covers})" if not differ else f"no ({covers}: " + "; ".join(differ) + ")"


def headline(ev: Evidence, results: Mapping[Setting, Result]) -> tuple[Setting, Result]:
    """The first setting (the thesis's choice, the first band) and its result; where the claim is
    measured over layer bands, its verdict stands only if every band agrees under that choice,
    else it is *inconclusive* and the measured text says which band gives which verdict."""
    (setting, result), *_ = results.items()
    by_band = {
        s.band: r
        for s, r in results.items()
        if s.band is not None and s.choice == setting.choice and s.weighting == setting.weighting
    }
    verdicts = {band: r.verdict for band, r in by_band.items() if r.verdict != NOT_MEASURED}
    if len(set(verdicts.values())) <= 1:
        return setting, result
    disagree = "; ".join(
        f"{band_name(band)}: {_verdict_on(ev, verdict)}" for band, verdict in verdicts.items()
    )
    measured = (
        f"the bands disagree ({disagree}), so no band decides; {band_name(setting.band)}: {result.measured}"
    )
    return setting, replace(result, verdict=INCONCLUSIVE, measured=measured)


def on_value_weighted(ev: Evidence, results: Mapping[Setting, Result]) -> str:
    """The claim's verdict and estimate on the value-weighted maps under the headline's setting
    (its bands as :func:`headline` reads them), or ``–`` where it is not measured on them."""
    if not results:
        return "–"
    _, result = headline(ev, results)
    if result.verdict == NOT_MEASURED:
        return "–"
    return f"{_verdict_on(ev, result.verdict)}: {result.interval}"


def _contrast(claim: Claim, result: Result) -> Contrast | None:
    """What the row's estimate subtracts: the measurement's contrast, else the claim's."""
    return result.contrast or claim.contrast


def _metric(claim: Claim, result: Result, thresholds: Thresholds) -> str:
    """The row's metric: the claim's template with the thresholds and the contrast in words."""
    contrast = _contrast(claim, result)
    return claim.metric.format(t=thresholds, contrast="" if contrast is None else contrast.text())


def _contrast_column(claim: Claim, result: Result) -> str | None:
    contrast = _contrast(claim, result)
    return None if contrast is None else str(contrast)


def _result_fields(claim: Claim, setting: Setting, result: Result) -> dict[str, object]:
    """The :data:`~attnscope.claims.records.RESULT_COLUMNS` of ``claim``'s ``result`` under ``setting``."""
    interval = result.interval
    return {
        "setting": setting.label(),
        "contrast": _contrast_column(claim, result),
        "estimate": interval.estimate,
        "low": interval.low,
        "high": interval.high,
        "bounds": result.bounds,
        "n_prompts": interval.n_clusters if result.per_prompt else None,
        "n_seeds": result.n_seeds,
    }


def evaluate(
    evidence: Evidence,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    bands: Sequence[str | int] = DEFAULT_BANDS,
    only: Collection[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The claims table of one model (:data:`COLUMNS`: one row per claim, the spectra claim one
    per observation and matrix, under the thesis's setting) and its sensitivity table
    (:data:`SENSITIVITY_COLUMNS`: every setting); ``only`` restricts both to those claims (their
    premises measured, not shown)."""
    table, sensitivity = [], []
    for row in _measure_all(evidence, thresholds, bands, only):
        if not row.results:
            continue
        setting, result = headline(evidence, row.results)
        value_results = {s: r for s, r in row.results.items() if s.weighting == VALUE_WEIGHTED}
        table.append(
            {
                "model": evidence.model,
                "claim": row.claim.claim,
                "section": row.claim.section,
                "statement": row.statement,
                "quote": row.claim.quote,
                "metric": _metric(row.claim, result, thresholds),
                **_result_fields(row.claim, setting, result),
                "measured": result.measured,
                "threshold": row.claim.threshold.format(t=thresholds),
                "verdict": _verdict_on(evidence, result.verdict),
                "robust": robustness(evidence, row.results),
                "value_weighted": on_value_weighted(evidence, value_results),
                "experiment": evidence.experiment,
                "variants": result.variants,
            }
        )
        sensitivity += [
            {
                "model": evidence.model,
                "claim": row.claim.claim,
                "statement": row.statement,
                "weighting": setting.weighting,
                **_result_fields(row.claim, setting, result),
                "verdict": _verdict_on(evidence, result.verdict),
            }
            for setting, result in row.results.items()
        ]
    frames = pd.DataFrame(table, columns=COLUMNS), pd.DataFrame(sensitivity, columns=SENSITIVITY_COLUMNS)
    for frame in frames:
        frame["n_prompts"] = frame["n_prompts"].astype("Int64")
    return frames
