# Publication figures (docs/figures.md), config section `figures:`. Every figure is written as
# PNG and SVG under results/figures/ and marked for the HTML report with a caption (report/).


rule attention_figures:
    input:
        store=attnscope_paths.ATTENTION_STORE,
    output:
        maps=report(
            directory(attnscope_paths.MAP_FIGURES),
            patterns=["{target}/{kind}.png"],
            caption="../report/attention_maps.rst",
            category=lambda wc: "Full passes over all layers" if wc.kind.endswith("_pass") else "Attention maps",
            subcategory="{experiment} · {variant}",
            labels=lambda wc: {  # wc: the target and kind, from the file pattern
                "target": wc.target,
                "figure": attnscope_mapview.map_label(wc.kind, config["attention"]["append_clue"]),
            },
        ),
    params:
        figures=lambda wc: attnscope_config.config_slice(
            config, "figures", attnscope_config.FIGURE_KEYS
        ),
        maps=lambda wc: PLAN.store_maps(wc.experiment, wc.variant),
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


rule metric_curves:
    """One experiment's per-layer metric curves with the 95 % interval of the mean across its
    prompts and shot-seed replicates (targets resampled), one line per variant."""
    input:
        metrics=lambda wc: [
            attnscope_paths.METRICS.format(model=model, variant=variant, experiment=name)
            for model, variant, name in PLAN.replicate_runs([wc.model], wc.experiment)
        ],
    output:
        **figure_outputs(
            attnscope_paths.METRIC_CURVES, "metric_curves", "Metric curves by layer",
            labels={"experiment": "{experiment}"},
        ),
    params:
        tables=lambda wc: PLAN.replicate_runs([wc.model], wc.experiment),
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


rule metric_curves_across_models:
    """One experiment's per-layer metric curves as metric_curves draws them, one row of panels per
    selected model."""
    input:
        metrics=lambda wc: [
            attnscope_paths.METRICS.format(model=model, variant=variant, experiment=name)
            for model, variant, name in PLAN.replicate_runs(PLAN.models, wc.experiment)
        ],
    output:
        **figure_outputs(
            attnscope_paths.METRIC_CURVES_ACROSS_MODELS, "metric_curves_across_models",
            "Metric curves by layer", labels={"experiment": "{experiment} · every model"},
        ),
    params:
        tables=lambda wc: PLAN.replicate_runs(PLAN.models, wc.experiment),
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


RANDOM_SEEDS = attnscope_variants.random_variants(PLAN.spectra_variants)
"""Every random-init variant whose spectra are taken: the band the learned spectra are drawn against."""


rule spectra_figures:
    input:
        trained=attnscope_paths.fill(attnscope_paths.SPECTRA, variant="trained"),
        trained_sv=attnscope_paths.fill(attnscope_paths.SINGULAR_VALUES, variant="trained"),
        trained_alignment=attnscope_paths.fill(attnscope_paths.ALIGNMENT, variant="trained"),
        random=attnscope_paths.fill(attnscope_paths.SPECTRA, variant=PLAN.random_variant),
        random_alignment=attnscope_paths.fill(attnscope_paths.ALIGNMENT, variant=PLAN.random_variant),
        seeds_sv=[attnscope_paths.fill(attnscope_paths.SINGULAR_VALUES, variant=v) for v in RANDOM_SEEDS],
    output:
        **figure_set_outputs(attnscope_paths.MODEL_FIGURES, attnscope_stems.SPECTRA_FIGURES, "Weight spectra"),
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
        **figure_set_outputs(attnscope_paths.THEORY_FIGURES, attnscope_stems.THEORY_FIGURES, "Theory"),
    params:
        theory=lambda wc: attnscope_config.config_slice(
            config, "theory", attnscope_config.THEORY_FIGURE_KEYS
        ),
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


# The figures of the heads and knockout stages, from the tables of rules/heads.smk and
# rules/knockout.smk: a figure setting (or heads.threshold, which only labels the head-type scores)
# reruns these, no job that runs a model or computes a table.


rule head_types_figure:
    input:
        table=attnscope_paths.HEAD_TYPES,
    output:
        **figure_outputs(
            attnscope_paths.HEAD_TYPE_FIGURE, "head_types", "Heads",
            labels={"variant": "{variant}", "figure": attnscope_stems.HEAD_FIGURES["head_types"]},
        ),
    params:
        heads=lambda wc: config["heads"],  # the threshold types the heads; the caption names the probe
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/head_types_figure/{model}/{variant}.log",
    benchmark:
        "results/benchmarks/head_types_figure/{model}/{variant}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_head_types.py"


rule rollout_figures:
    input:
        table=attnscope_paths.ROLLOUT,
    output:
        # one per stem of plots.ROLLOUT_FIGURES: the rollout of the weights, of the value-weighted maps
        **figure_outputs(
            attnscope_paths.ROLLOUT_FIGURE, "rollout", "Heads", subcategory="{experiment} · {variant}",
            labels={"variant": "{variant}", "figure": attnscope_stems.HEAD_FIGURES["rollout"]},
            prefix="rollout_",
        ),
        **figure_outputs(
            attnscope_paths.VALUE_ROLLOUT_FIGURE, "rollout_value", "Heads", subcategory="{experiment} · {variant}",
            labels={"variant": "{variant}", "figure": attnscope_stems.HEAD_FIGURES["rollout_value"]},
            prefix="rollout_value_",
        ),
    params:
        experiment=lambda wc: {"category": experiment_plan(wc).category, "k": experiment_plan(wc).k},  # title
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/rollout_figures/{model}/{variant}/{experiment}.log",
    benchmark:
        "results/benchmarks/rollout_figures/{model}/{variant}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_rollout.py"


rule head_correlations_figure:
    input:
        table=attnscope_paths.HEAD_CORRELATIONS,
    output:
        **figure_outputs(
            attnscope_paths.HEAD_CORRELATION_FIGURE, "head_correlations", "Heads",
            labels={"figure": attnscope_stems.HEAD_FIGURES["head_correlations"]},
        ),
    params:
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/head_correlations_figure/{model}.log",
    benchmark:
        "results/benchmarks/head_correlations_figure/{model}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_head_correlations.py"


rule knockout_figure:
    input:
        table=attnscope_paths.KNOCKOUT_EFFECTS,
    output:
        **figure_outputs(
            attnscope_paths.KNOCKOUT_FIGURE, attnscope_stems.KNOCKOUT_FIGURE, "Knockout effects",
            labels={"experiment": "{experiment}"},
        ),
    params:
        dpi=lambda wc: config["figures"]["dpi"],
    log:
        "results/logs/knockout_figure/{model}/{experiment}.log",
    benchmark:
        "results/benchmarks/knockout_figure/{model}/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/figures_knockout.py"


rule clue_comparison:
    localrule: True
    input:
        clues=lambda wc: [
            attnscope_paths.CLUES.format(model=wc.model, variant=variant, experiment=wc.experiment)
            for variant in experiment_plan(wc).variants
        ],
        tables=lambda wc: [
            attnscope_paths.CLUE_TABLE_CSV.format(model=wc.model, variant=variant, experiment=wc.experiment)
            for variant in experiment_plan(wc).variants
        ],
    output:
        csv=attnscope_paths.VARIANT_CLUES_CSV,
        markdown=attnscope_paths.VARIANT_CLUES_MD,
        html=report(
            attnscope_paths.VARIANT_CLUES_HTML, caption="../report/clue_tables.rst",
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


rule figures:
    input:
        figure_targets(attnscope_stems.SPECTRA_FIGURES, attnscope_stems.THEORY_FIGURES),
