# The thesis-claims table and the Snakemake HTML report (docs/figures.md). `report` is a named
# target that builds every figure, table and the claims; Snakemake writes the report after the
# run: `snakemake --cores 2 report --report results/report.html --report-after-run`, or from
# finished results with `snakemake --report results/report.html`.


from attnscope import evidence as attnscope_evidence


report: "../report/workflow.rst"


def claims_spec(wildcards=None):
    """What the claims are measured on: the models, the reference experiments (`claims.experiment`)
    and every experiment's variants, seed and replicate group; attnscope.evidence lays out the files."""
    return {
        "models": PLAN.models,
        "experiments": PLAN.claims_experiments,
        "runs": {
            name: {"variants": e.variants, "seed": e.seed, "replicate_group": e.replicate_group}
            for name, e in PLAN.experiments.items()
        },
        "spectra_variants": PLAN.spectra_variants,
        "thesis_models": [m for m in PLAN.models if config["models"][m]["thesis_model"]],
        "knockouts": KNOCKOUTS,
    }


def claims_inputs(wildcards):
    return attnscope_evidence.evidence_files(attnscope_evidence.evidence_layout(**claims_spec()))


rule claims:
    input:
        unpack(claims_inputs),
    output:
        table="results/claims.parquet",
        sensitivity="results/claims_sensitivity.parquet",
        markdown="results/claims.md",
        html=report("results/claims.html", caption="../report/claims.rst", category="Thesis claims"),
    params:
        claims=claims_spec,
        bands=lambda wc: config["claims"]["bands"],
    log:
        "results/logs/claims.log",
    benchmark:
        "results/benchmarks/claims.tsv"
    resources:
        **fixed_resources(mem_mb=1500, runtime=10),
    script:
        "../scripts/claims.py"


rule report:
    """Every input of the HTML report: figures, clue tables and the claims. The report itself is
    Snakemake's: `snakemake --cores 2 report --report results/report.html --report-after-run`."""
    localrule: True
    input:
        rules.figures.input,
        rules.claims.output,
