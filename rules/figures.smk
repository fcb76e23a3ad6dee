# Publication figures (docs/figures.md), config section `figures:`. Every figure is written as
# PNG and SVG under results/figures/ and marked for the HTML report with a caption (report/).
import re as _re
import sys as _sys

wildcard_constraints:
    target=r"[\w-]+",
    kind="token_grid|word_grid|cosine|word_pass|token_pass|thesis_grid",


FIGURE_FORMATS = ("png", "svg")
FIGURE_KEYS = ("dpi", "grid_layers", "cosine_layers", "pass_columns", "color_max")
"""The `figures:` keys the attention-map figures depend on (their params, hence rerun trigger)."""


def target_slug(target):
    """A target word as a path component (letters, digits, '-' and '_')."""
    return _re.sub(r"[^\w-]+", "_", target)


MAP_KINDS = {
    "token_grid": "token-level maps, 2×2 layers",
    "word_grid": "word-level maps, 2×2 layers",
    "cosine": "embedding cosine beside attention",
    "word_pass": "word-level maps, every layer",
    "token_pass": "token-level maps, every layer",
    "thesis_grid": "the thesis's word-level maps (its notebook's words, prompt only), its layers, per-panel scales",
}


def _map_figures():
    """{(experiment, variant, target slug, kind): target} of every attention-map figure in
    `figures.maps`; experiments, variants and targets the run lacks are skipped with a warning
    (a config that replaces `experiments:` keeps working)."""
    figures = {}
    for i, entry in enumerate(config["figures"]["maps"]):
        for experiment in entry["experiments"]:
            if experiment not in config["experiments"]:
                print(f"figures.maps[{i}]: no experiment {experiment!r} in this run; skipped", file=_sys.stderr)
                continue
            run = PLAN.variants[experiment]
            targets = {t.casefold(): t for t in PLAN.targets[experiment]}
            chosen = run if entry["variants"] == "all" else [v for v in entry["variants"] if v in run]
            wanted = list(targets.values()) if entry["targets"] == "all" else [
                targets[t.casefold()] for t in entry["targets"] if t.casefold() in targets
            ]
            lacking = [v for v in entry["variants"] if v not in run] if entry["variants"] != "all" else []
            lacking += [t for t in entry["targets"] if t.casefold() not in targets] if entry["targets"] != "all" else []
            if lacking:
                print(f"figures.maps[{i}]: {experiment} has no {', '.join(lacking)}; skipped", file=_sys.stderr)
            for variant in chosen:
                for target in wanted:
                    for kind in entry["kinds"]:
                        figures[(experiment, variant, target_slug(target), kind)] = target
    return figures


MAP_FIGURES = _map_figures()


def target_of(wildcards):
    key = (wildcards.experiment, wildcards.variant, wildcards.target, wildcards.kind)
    return MAP_FIGURES[key]


def figure_options(wildcards):
    return {key: config["figures"][key] for key in FIGURE_KEYS}


def figure_paths(stem):
    return [f"{stem}.{ext}" for ext in FIGURE_FORMATS]


def figure_outputs(stem, caption, category, subcategory=None, labels=None):
    """{png, svg} outputs of one figure; the PNG goes into the report with its caption."""
    return {
        "png": report(
            f"{stem}.png",
            caption=f"../report/{caption}.rst",
            category=category,
            subcategory=subcategory,
            labels=labels,
        ),
        "svg": f"{stem}.svg",
    }


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
            lambda wc: {"target": wc.target, "figure": MAP_KINDS[wc.kind]},
        ),
    params:
        figures=figure_options,
        target=target_of,
        experiment=lambda wc: {key: config["experiments"][wc.experiment][key] for key in ("category", "k")},  # caption
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
            for variant in PLAN.variants[wc.experiment]
        ],
    output:
        **figure_outputs(
            "results/figures/{model}/{experiment}_metric_curves", "metric_curves", "Metric curves by layer",
            labels={"experiment": "{experiment}"},
        ),
    params:
        variants=lambda wc: PLAN.variants[wc.experiment],
        metrics=lambda wc: config["figures"]["curve_metrics"],
        dpi=lambda wc: config["figures"]["dpi"],
        experiment=lambda wc: {key: config["experiments"][wc.experiment][key] for key in ("category", "k")},
    log:
        "results/logs/metric_curves/{model}/{experiment}.log",
    benchmark:
        "results/benchmarks/metric_curves/{model}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_metrics.py"


SPECTRA = "results/spectra/{model}"


def random_variant(wildcards=None):
    return config["spectra"]["random_variant"]


rule spectra_figures:
    input:
        trained=f"{SPECTRA}/trained.parquet",
        trained_sv=f"{SPECTRA}/trained.zarr",
        trained_alignment=f"{SPECTRA}/trained_alignment.parquet",
        random=lambda wc: f"{SPECTRA.format(model=wc.model)}/{random_variant()}.parquet",
        random_sv=lambda wc: f"{SPECTRA.format(model=wc.model)}/{random_variant()}.zarr",
        random_alignment=lambda wc: f"{SPECTRA.format(model=wc.model)}/{random_variant()}_alignment.parquet",
    output:
        **{f"random_{k}": v for k, v in figure_outputs(
            "results/figures/{model}/spectra_random", "spectra_random", "Weight spectra",
            labels={"figure": "A.19 random init"}).items()},
        **{f"attention_{k}": v for k, v in figure_outputs(
            "results/figures/{model}/spectra_attention", "spectra_attention", "Weight spectra",
            labels={"figure": "A.20 W_q, W_k, W_v, W_o"}).items()},
        **{f"mlp_{k}": v for k, v in figure_outputs(
            "results/figures/{model}/spectra_mlp", "spectra_mlp", "Weight spectra",
            labels={"figure": "A.21 MLP"}).items()},
        **{f"alignment_{k}": v for k, v in figure_outputs(
            "results/figures/{model}/base_alignment", "base_alignment", "Weight spectra",
            labels={"figure": "A.22 Tr(W_qᵀW_k)"}).items()},
    params:
        random_variant=random_variant,
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
        **{f"mp_{k}": v for k, v in figure_outputs(
            "results/figures/theory/mp_density", "mp_density", "Theory", labels={"figure": "2.4 Marchenko–Pastur"}).items()},
        **{f"slerp_{k}": v for k, v in figure_outputs(
            "results/figures/theory/slerp_kl", "slerp_kl", "Theory", labels={"figure": "5.1 SLERP–KL"}).items()},
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
            f"results/clues/{wc.model}/{variant}/{wc.experiment}.parquet" for variant in PLAN.variants[wc.experiment]
        ],
        tables=lambda wc: [
            f"results/tables/{wc.model}/{variant}/{wc.experiment}_clues.csv" for variant in PLAN.variants[wc.experiment]
        ],
    output:
        csv="results/tables/{model}/{experiment}_variants.csv",
        markdown="results/tables/{model}/{experiment}_variants.md",
        html=report(
            "results/figures/{model}/{experiment}_clues.html", caption="../report/clue_tables.rst",
            category="Clue tables", labels={"experiment": "{experiment}"},
        ),
    params:
        variants=lambda wc: PLAN.variants[wc.experiment],
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
        for experiment, variant, target, kind in MAP_FIGURES:
            stem = MAPS.format(model=model, variant=variant, experiment=experiment, target=target)
            files += figure_paths(f"{stem}/{kind}")
        for experiment in config["experiments"]:
            files += figure_paths(f"results/figures/{model}/{experiment}_metric_curves")
            files += [
                f"results/tables/{model}/{experiment}_variants.csv",
                f"results/figures/{model}/{experiment}_clues.html",
            ]
        for name in ("spectra_random", "spectra_attention", "spectra_mlp", "base_alignment"):
            files += figure_paths(f"results/figures/{model}/{name}")
    files += [p for name in ("mp_density", "slerp_kl") for p in figure_paths(f"results/figures/theory/{name}")]
    return files


rule figures:
    input:
        figure_targets(),
