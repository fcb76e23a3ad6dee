# Publication figures (docs/figures.md), config section `figures:`. Every figure is written as
# PNG and SVG under results/figures/ and marked for the HTML report with a caption (report/).


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
    """The report labels of a map figure (``wildcards`` has its target and kind, from the report's
    file pattern): its target and kind, and whether it draws the clue."""
    clue = config["attention"]["append_clue"] and wildcards.kind != "thesis_grid"
    kind = MAP_KINDS[wildcards.kind] + (", prompt + generated clue" if clue else ", prompt only")
    return {"target": wildcards.target, "figure": kind}


def store_maps(wildcards):
    """The map figures of one store: target slug (its folder) → the target word and its kinds."""
    maps = {}
    for (experiment, variant, slug, kind), target in PLAN.map_figures.items():
        if (experiment, variant) == (wildcards.experiment, wildcards.variant):
            maps.setdefault(slug, {"target": target, "kinds": []})["kinds"].append(kind)
    return maps


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


MAPS = "results/figures/{model}/{variant}/{experiment}"
"""The folder of one store's map figures: ``{target}/{kind}.{png,svg}`` for each of its figures."""


rule attention_figures:
    input:
        store="results/attention/{model}/{variant}/{experiment}.zarr",
    output:
        maps=report(
            directory(MAPS),
            patterns=["{target}/{kind}.png"],
            caption="../report/attention_maps.rst",
            category=lambda wc: "Full passes over all layers" if wc.kind.endswith("_pass") else "Attention maps",
            subcategory="{experiment} · {variant}",
            labels=map_labels,
        ),
    params:
        figures=figure_options,
        maps=store_maps,
        formats=FIGURE_FORMATS,
        experiment=lambda wc: {"category": experiment_plan(wc).category, "k": experiment_plan(wc).k},  # caption
        append_clue=lambda wc: config["attention"]["append_clue"],  # caption
    log:
        "results/logs/attention_figures/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/attention_figures/{model}/{variant}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1500, runtime=20),
    script:
        "../scripts/figures_attention.py"


def curve_tables(models, experiment):
    """[model, variant, replicate] of every metrics table of an experiment's curves: every variant
    of every shot-seed replicate, for each of ``models``."""
    return [
        [model, variant, name]
        for model in models
        for name in PLAN.replicates(experiment)
        for variant in PLAN.experiments[name].variants
    ]


def curve_metrics_files(models, experiment):
    return [f"results/metrics/{m}/{v}/{name}.parquet" for m, v, name in curve_tables(models, experiment)]


rule metric_curves:
    """One experiment's per-layer metric curves with the 95 % interval of the mean across its
    prompts and shot-seed replicates (targets resampled), one line per variant."""
    input:
        metrics=lambda wc: curve_metrics_files([wc.model], wc.experiment),
    output:
        **figure_outputs(
            "results/figures/{model}/{experiment}_metric_curves", "metric_curves", "Metric curves by layer",
            labels={"experiment": "{experiment}"},
        ),
    params:
        tables=lambda wc: curve_tables([wc.model], wc.experiment),
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


ACROSS_MODELS = "results/figures/across_models"
"""The figures that set the selected models side by side (when more than one is selected)."""


rule metric_curves_across_models:
    """One experiment's per-layer metric curves as metric_curves draws them, one row of panels per
    selected model."""
    input:
        metrics=lambda wc: curve_metrics_files(PLAN.models, wc.experiment),
    output:
        **figure_outputs(
            f"{ACROSS_MODELS}/{{experiment}}_metric_curves", "metric_curves_across_models",
            "Metric curves by layer", labels={"experiment": "{experiment} · every model"},
        ),
    params:
        tables=lambda wc: curve_tables(PLAN.models, wc.experiment),
        metrics=lambda wc: config["figures"]["curve_metrics"],
        dpi=lambda wc: config["figures"]["dpi"],
        experiment=lambda wc: {"category": experiment_plan(wc).category, "k": experiment_plan(wc).k},
    log:
        "results/logs/metric_curves_across_models/{experiment}.log",
    benchmark:
        "results/benchmarks/metric_curves_across_models/{experiment}.tsv"
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


RANDOM_SEEDS = [v for v in PLAN.spectra_variants if attnscope_variants.parse(v).kind == "random"]
"""Every random-init variant whose spectra are taken: the band the learned spectra are drawn against."""


rule spectra_figures:
    input:
        trained=f"{SPECTRA}/trained.parquet",
        trained_sv=f"{SPECTRA}/trained.zarr",
        trained_alignment=f"{SPECTRA}/trained_alignment.parquet",
        random=f"{SPECTRA}/{PLAN.random_variant}.parquet",
        random_alignment=f"{SPECTRA}/{PLAN.random_variant}_alignment.parquet",
        seeds_sv=[f"{SPECTRA}/{v}.zarr" for v in RANDOM_SEEDS],
    output:
        **figure_set_outputs("results/figures/{model}", SPECTRA_FIGURES, "Weight spectra"),
    params:
        random_variant=PLAN.random_variant,
        random_seeds=RANDOM_SEEDS,
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
    """Every figure, clue table and comparison of the selected models (PNG and SVG; the map
    figures of a store as its folder, see rule attention_figures)."""
    files = []
    for model in PLAN.models:
        stores = dict.fromkeys((experiment, variant) for experiment, variant, _, _ in PLAN.map_figures)
        files += [MAPS.format(model=model, variant=v, experiment=e) for e, v in stores]
        for experiment in PLAN.experiments:
            if experiment in PLAN.replicate_groups():  # one curve figure pools the replicates
                files += figure_paths(f"results/figures/{model}/{experiment}_metric_curves")
            files += [
                f"results/tables/{model}/{experiment}_variants.csv",
                f"results/figures/{model}/{experiment}_clues.html",
            ]
        for name in SPECTRA_FIGURES:
            files += figure_paths(f"results/figures/{model}/{name}")
    if len(PLAN.models) > 1:
        files += [
            p for e in PLAN.replicate_groups() for p in figure_paths(f"{ACROSS_MODELS}/{e}_metric_curves")
        ]
    files += [p for name in THEORY_FIGURES for p in figure_paths(f"results/figures/theory/{name}")]
    return files


rule figures:
    input:
        figure_targets(),
