# Publication figures (docs/figures.md), config section `figures:`. Every figure is written as
# PNG and SVG under results/figures/ and marked for the HTML report with a caption (report/).


wildcard_constraints:
    target=r"[\w-]+",
    kind="token_grid|word_grid|cosine|word_pass|token_pass|thesis_grid",


FIGURE_FORMATS = ("png", "svg")
FIGURE_KEYS = ("dpi", "grid_layers", "cosine_layers", "pass_columns", "color_max")
"""The `figures:` keys the attention-map figures depend on (their params, hence rerun trigger)."""


MAP_KINDS = {
    "token_grid": "token-level maps, 2×2 layers",
    "word_grid": "word-level maps, 2×2 layers",
    "cosine": "embedding cosine beside attention",
    "word_pass": "word-level maps, every layer",
    "token_pass": "token-level maps, every layer",
    "thesis_grid": "the thesis's word-level maps (its notebook's words, prompt only), its layers, per-panel scales",
}


def map_labels(wildcards):
    """The report labels of a map figure: its target and kind, and whether it draws the clue."""
    clue = config["attention"]["append_clue"] and wildcards.kind != "thesis_grid"
    kind = MAP_KINDS[wildcards.kind] + (", prompt + generated clue" if clue else ", prompt only")
    return {"target": wildcards.target, "figure": kind}


def target_of(wildcards):
    key = (wildcards.experiment, wildcards.variant, wildcards.target, wildcards.kind)
    return PLAN.map_figures[key]


def figure_options(wildcards):
    return {key: config["figures"][key] for key in FIGURE_KEYS}


def figure_paths(stem):
    return [f"{stem}.{ext}" for ext in FIGURE_FORMATS]


def figure_outputs(stem, caption, category, subcategory=None, labels=None, prefix=""):
    """{png, svg} outputs of one figure (named ``{prefix}png``, ``{prefix}svg``); the PNG goes into
    the report with its caption."""
    return {
        f"{prefix}png": report(
            f"{stem}.png",
            caption=f"../report/{caption}.rst",
            category=category,
            subcategory=subcategory,
            labels=labels,
        ),
        f"{prefix}svg": f"{stem}.svg",
    }


def figure_set_outputs(folder, figures, category):
    """The outputs of several figures one job draws: ``figures`` maps a file stem (also its
    caption's name in report/) to its thesis-figure label; outputs ``{stem}_png``, ``{stem}_svg``."""
    outputs = {}
    for stem, label in figures.items():
        outputs.update(
            figure_outputs(f"{folder}/{stem}", stem, category, labels={"figure": label}, prefix=f"{stem}_")
        )
    return outputs


MAPS = "results/figures/{model}/{variant}/{experiment}/{target}"


rule attention_figure:
    input:
        store="results/attention/{model}/{variant}/{experiment}.zarr",
    output:
        **figure_outputs(
            f"{MAPS}/{{kind}}",
            "attention_maps",
            lambda wc: "Full passes over all layers" if wc.kind.endswith("_pass") else "Attention maps",
            "{experiment} · {variant}",
            map_labels,
        ),
    params:
        figures=figure_options,
        target=target_of,
        experiment=lambda wc: {"category": experiment_plan(wc).category, "k": experiment_plan(wc).k},  # caption
        append_clue=lambda wc: config["attention"]["append_clue"],  # caption
    log:
        "results/logs/attention_figure/{model}/{variant}/{experiment}/{target}/{kind}.log",
    benchmark:
        "results/benchmarks/attention_figure/{model}/{variant}/{experiment}/{target}/{kind}.tsv"
    resources:
        **fixed_resources(mem_mb=1500, runtime=10),
    script:
        "../scripts/figures_attention.py"


rule metric_curves:
    input:
        summaries=lambda wc: [
            f"results/metrics/{wc.model}/{variant}/{wc.experiment}.summary.parquet"
            for variant in experiment_plan(wc).variants
        ],
    output:
        **figure_outputs(
            "results/figures/{model}/{experiment}_metric_curves", "metric_curves", "Metric curves by layer",
            labels={"experiment": "{experiment}"},
        ),
    params:
        variants=lambda wc: experiment_plan(wc).variants,
        metrics=lambda wc: config["figures"]["curve_metrics"],
        dpi=lambda wc: config["figures"]["dpi"],
        experiment=lambda wc: {"category": experiment_plan(wc).category, "k": experiment_plan(wc).k},
    log:
        "results/logs/metric_curves/{model}/{experiment}.log",
    benchmark:
        "results/benchmarks/metric_curves/{model}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_metrics.py"


SPECTRA = "results/spectra/{model}"
SPECTRA_FIGURES = {
    "spectra_random": "A.19 random init",
    "spectra_attention": "A.20 W_q, W_k, W_v, W_o",
    "spectra_mlp": "A.21 MLP",
    "base_alignment": "A.22 Tr(W_qᵀW_k)",
}
"""The figures of spectra_figures (file stem → thesis figure), drawn by plots.spectra_figures."""
THEORY_FIGURES = {"mp_density": "2.4 Marchenko–Pastur", "slerp_kl": "5.1 SLERP–KL"}


rule spectra_figures:
    input:
        trained=f"{SPECTRA}/trained.parquet",
        trained_sv=f"{SPECTRA}/trained.zarr",
        trained_alignment=f"{SPECTRA}/trained_alignment.parquet",
        random=f"{SPECTRA}/{PLAN.random_variant}.parquet",
        random_sv=f"{SPECTRA}/{PLAN.random_variant}.zarr",
        random_alignment=f"{SPECTRA}/{PLAN.random_variant}_alignment.parquet",
    output:
        **figure_set_outputs("results/figures/{model}", SPECTRA_FIGURES, "Weight spectra"),
    params:
        random_variant=PLAN.random_variant,
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/spectra_figures/{model}.log",
    benchmark:
        "results/benchmarks/spectra_figures/{model}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_spectra.py"


rule theory_figures:
    output:
        **figure_set_outputs("results/figures/theory", THEORY_FIGURES, "Theory"),
    params:
        theory=lambda wc: {key: config["theory"][key] for key in ("seed", "slerp_dim", "slerp_pairs", "slerp_length")},
        mp_shapes=lambda wc: config["figures"]["mp_shapes"],
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/theory_figures.log",
    benchmark:
        "results/benchmarks/theory_figures.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_theory.py"


rule clue_comparison:
    input:
        clues=lambda wc: [
            f"results/clues/{wc.model}/{variant}/{wc.experiment}.parquet" for variant in experiment_plan(wc).variants
        ],
        tables=lambda wc: [
            f"results/tables/{wc.model}/{variant}/{wc.experiment}_clues.csv"
            for variant in experiment_plan(wc).variants
        ],
    output:
        csv="results/tables/{model}/{experiment}_variants.csv",
        markdown="results/tables/{model}/{experiment}_variants.md",
        html=report(
            "results/figures/{model}/{experiment}_clues.html", caption="../report/clue_tables.rst",
            category="Clue tables", labels={"experiment": "{experiment}"},
        ),
    params:
        variants=lambda wc: experiment_plan(wc).variants,
    log:
        "results/logs/clue_comparison/{model}/{experiment}.log",
    benchmark:
        "results/benchmarks/clue_comparison/{model}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/clue_comparison.py"


def figure_targets():
    """Every figure, clue table and comparison of the selected models (PNG and SVG)."""
    files = []
    for model in PLAN.models:
        for experiment, variant, target, kind in PLAN.map_figures:
            stem = MAPS.format(model=model, variant=variant, experiment=experiment, target=target)
            files += figure_paths(f"{stem}/{kind}")
        for experiment in PLAN.experiments:
            files += figure_paths(f"results/figures/{model}/{experiment}_metric_curves")
            files += [
                f"results/tables/{model}/{experiment}_variants.csv",
                f"results/figures/{model}/{experiment}_clues.html",
            ]
        for name in SPECTRA_FIGURES:
            files += figure_paths(f"results/figures/{model}/{name}")
    files += [p for name in THEORY_FIGURES for p in figure_paths(f"results/figures/theory/{name}")]
    return files


rule figures:
    input:
        figure_targets(),
