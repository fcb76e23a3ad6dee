"""Where the workflow writes: every path pattern under ``results/``, once.

The rules (``rules/*.smk``) name their inputs and outputs with these patterns, their braces
being Snakemake wildcards, and :mod:`attnscope.evidence` finds the claims' inputs with them
(``PROMPTS.format(model=..., experiment=...)``), so a result moves in one place. A job's log
and benchmark files are named in its rule only. This module imports nothing: the Snakefile
reads it on every invocation.
"""

RESULTS = "results"
"""The folder of every output (the explorer serves it)."""

RUN = "{model}/{variant}/{experiment}"
"""One model variant on one experiment: the unit of generation, attention capture and metrics."""

IMPORTED_CLUES = "results/data/clues.parquet"
IMPORT_REPORT = "results/data/import_report.json"
TARGET_REPORT = "results/data/targets/{experiment}.json"

MANIFEST = "results/models/{model}/manifest.json"
SMOLLM2_TOKENIZER = "results/tokenizers/smollm2"
"""SmolLM2's tokenizer converted from its GGUF once per run, as ``save_pretrained`` writes it: what
the tiny random models that use it read (the GGUF's vocabulary takes seconds to read)."""

PROMPTS = "results/prompts/{model}/{experiment}.parquet"

CLUES = f"results/clues/{RUN}.parquet"
CLUE_SUMMARY = f"results/clues/{RUN}.summary.json"
CLUE_TIMING = f"results/clues/{RUN}.timing.tsv"
CLUE_TABLE_CSV = f"results/tables/{RUN}_clues.csv"
CLUE_TABLE_MD = f"results/tables/{RUN}_clues.md"
VARIANT_CLUES_CSV = "results/tables/{model}/{experiment}_variants.csv"
VARIANT_CLUES_MD = "results/tables/{model}/{experiment}_variants.md"
VARIANT_CLUES_HTML = "results/figures/{model}/{experiment}_clues.html"

ATTENTION_STORE = f"results/attention/{RUN}.zarr"
METRICS = f"results/metrics/{RUN}.parquet"
METRICS_SUMMARY = f"results/metrics/{RUN}.summary.parquet"
METRICS_SUMMARY_MD = f"results/metrics/{RUN}.summary.md"
CHOICES = f"results/metrics/{RUN}.choices.parquet"
VALUE_METRICS = f"results/metrics/{RUN}.value.parquet"
"""The metrics table of the value-weighted maps (``METRICS``'s columns, spectral ranks NaN)."""
VALUE_CHOICES = f"results/metrics/{RUN}.value_choices.parquet"

SPECTRA = "results/spectra/{model}/{variant}.parquet"
SINGULAR_VALUES = "results/spectra/{model}/{variant}.zarr"
ALIGNMENT = "results/spectra/{model}/{variant}_alignment.parquet"
QK_CIRCUITS = "results/spectra/{model}/{variant}_qk_circuits.parquet"
OV_CIRCUITS = "results/spectra/{model}/{variant}_ov_circuits.parquet"
LEARNED_VS_RANDOM = "results/spectra/{model}/learned_vs_random.parquet"
LEARNED_VS_RANDOM_MD = "results/spectra/{model}/learned_vs_random.md"

HEAD_TYPES = "results/heads/{model}/{variant}.types.parquet"
HEAD_TABLE = "results/heads/{model}/{variant}.parquet"
HEAD_CORRELATIONS = "results/heads/{model}/correlations.parquet"
ROLLOUT = f"results/rollout/{RUN}.parquet"

THEORY_CHECKS = "results/theory/checks.parquet"
THEORY_CHECKS_MD = "results/theory/checks.md"

MAP_FIGURES = f"results/figures/{RUN}"
"""The folder of one store's map figures: ``{target}/{kind}.{png,svg}`` for each of its figures."""
METRIC_CURVES = "results/figures/{model}/{experiment}_metric_curves"
"""A figure's stem (its files add ``.png``, ``.svg``)."""
MODEL_FIGURES = "results/figures/{model}"
"""The folder of a model's spectra figures (``{stem}.png``, ``{stem}.svg``)."""
THEORY_FIGURES = "results/figures/theory"
METRIC_CURVES_ACROSS_MODELS = "results/figures/across_models/{experiment}_metric_curves"
"""An experiment's metric curves with one row of panels per selected model (several models only)."""
HEAD_TYPE_FIGURE = "results/figures/{model}/{variant}_head_types"
HEAD_CORRELATION_FIGURE = "results/figures/{model}/head_correlations"
ROLLOUT_FIGURE = f"results/figures/{RUN}_rollout"
VALUE_ROLLOUT_FIGURE = f"results/figures/{RUN}_rollout_value"
"""The rollout of the value-weighted maps (``ROLLOUT_FIGURE``: of the weights)."""

KNOCKOUT = "results/knockout/{model}/{knockouts}/{experiment}.parquet"
"""The knockouts of one ``knockout.edges`` entry (every window: one job,
:func:`attnscope.variants.knockout_sets`) on one experiment: their per-prompt effects."""
KNOCKOUT_EFFECTS = "results/knockout/{model}/{experiment}.parquet"
KNOCKOUT_EFFECTS_MD = "results/knockout/{model}/{experiment}.md"
KNOCKOUT_FIGURE = "results/figures/{model}/{experiment}_knockout"
"""A figure's stem (its files add ``.png``, ``.svg``)."""

CLAIMS = "results/claims.parquet"
CLAIMS_SENSITIVITY = "results/claims_sensitivity.parquet"
CLAIMS_MD = "results/claims.md"
CLAIMS_HTML = "results/claims.html"
CLAIMS_ACROSS_MODELS = "results/claims_across_models.parquet"
CLAIMS_ACROSS_MODELS_MD = "results/claims_across_models.md"
CLAIMS_ACROSS_MODELS_HTML = "results/claims_across_models.html"


class _Wildcards(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill(pattern: str, **values: object) -> str:
    """``pattern`` with the named wildcards filled in and the others kept as wildcards
    (``fill(SPECTRA, variant="trained")`` is ``results/spectra/{model}/trained.parquet``)."""
    return pattern.format_map(_Wildcards(values))
