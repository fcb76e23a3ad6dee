# The thesis-claims table and the Snakemake HTML report (docs/figures.md). The report is a
# named target: `snakemake --cores 2 report` builds every figure, table and the claims and
# writes results/report.html; `snakemake --report results/report.html` writes the same
# report from finished results.


report: "../report/workflow.rst"


def claims_experiment():
    """The experiment the attention claims are measured on: `claims.experiment`, else the first."""
    name = config["claims"]["experiment"]
    if name is None:
        return next(iter(config["experiments"]))
    if name not in config["experiments"]:
        raise attnscope_config.ConfigError(
            f"claims.experiment: no experiment {name!r} (experiments: {', '.join(config['experiments'])})"
        )
    return name


CLAIMS_EXPERIMENT = claims_experiment()


def claims_layout(wildcards=None):
    """Per model, the inputs of every claim (variant → metrics, the trained store, every
    variant's clues and every experiment's prompts, the spectra tables)."""
    experiment = CLAIMS_EXPERIMENT
    layout = {}
    for model in PLAN.models:
        layout[model] = {
            "experiment": experiment,
            "metrics": {
                variant: f"results/metrics/{model}/{variant}/{experiment}.parquet"
                for variant in PLAN.variants[experiment]
            },
            "store": f"results/attention/{model}/trained/{experiment}.zarr"
            if "trained" in PLAN.variants[experiment]
            else None,
            "clues": [
                [variant, exp, f"results/clues/{model}/{variant}/{exp}.parquet"]
                for exp in config["experiments"]
                for variant in PLAN.variants[exp]
            ],
            "prompts": {exp: f"results/prompts/{model}/{exp}.parquet" for exp in config["experiments"]},
            "spectra": f"results/spectra/{model}/learned_vs_random.parquet",
            "alignment": f"results/spectra/{model}/trained_alignment.parquet",
        }
    return layout


def claims_inputs(wildcards=None):
    files = []
    for entry in claims_layout().values():
        files += list(entry["metrics"].values()) + [path for _, _, path in entry["clues"]]
        files += list(entry["prompts"].values()) + [entry["spectra"], entry["alignment"]]
        files += [entry["store"]] if entry["store"] else []
    return files


rule claims:
    input:
        claims_inputs,
    output:
        table="results/claims.parquet",
        markdown="results/claims.md",
        html=report("results/claims.html", caption="../report/claims.rst", category="Thesis claims"),
    params:
        layout=claims_layout,
    log:
        "results/logs/claims.log",
    benchmark:
        "results/benchmarks/claims.tsv"
    resources:
        **fixed_resources(mem_mb=1500, runtime=10),
    script:
        "../scripts/claims.py"


rule report:
    input:
        rules.figures.input,
        rules.claims.output,
    output:
        "results/report.html",
    params:
        snakefile=workflow.main_snakefile,
        config=lambda wc: config,
    log:
        "results/logs/report.log",
    benchmark:
        "results/benchmarks/report.tsv"
    resources:
        **fixed_resources(mem_mb=2000, runtime=15),
    script:
        "../scripts/report_html.py"
