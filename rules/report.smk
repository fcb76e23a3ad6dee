# The thesis-claims table and the Snakemake HTML report (docs/figures.md). `report` is a named
# target that builds every figure, table and the claims; Snakemake writes the report after the
# run: `snakemake --cores 2 report --report results/report.html --report-after-run`, or from
# finished results with `snakemake --report results/report.html`.


from attnscope import evidence as attnscope_evidence


report: "../report/workflow.rst"


rule claims:
    input:
        # every model's evidence (attnscope.evidence lays out the files), by kind
        unpack(
            lambda wc: attnscope_evidence.evidence_files(
                attnscope_evidence.evidence_layout(**PLAN.claims_spec(), knockouts=KNOCKOUTS)
            )
        ),
    output:
        table=attnscope_paths.CLAIMS,
        sensitivity=attnscope_paths.CLAIMS_SENSITIVITY,
        markdown=attnscope_paths.CLAIMS_MD,
        html=report(attnscope_paths.CLAIMS_HTML, caption="../report/claims.rst", category="Thesis claims"),
    params:
        claims=lambda wc: {**PLAN.claims_spec(), "knockouts": KNOCKOUTS},
        bands=lambda wc: config["claims"]["bands"],
    log:
        "results/logs/claims.log",
    benchmark:
        "results/benchmarks/claims.tsv"
    resources:
        **fixed_resources(mem_mb=1500, runtime=10),
    script:
        "../scripts/claims.py"


rule claims_across_models:
    """The claims of every selected model side by side, whether the models agree (attnscope.claims.across);
    part of the report when more than one model is selected."""
    input:
        table=rules.claims.output.table,
    output:
        table=attnscope_paths.CLAIMS_ACROSS_MODELS,
        markdown=attnscope_paths.CLAIMS_ACROSS_MODELS_MD,
        html=report(
            attnscope_paths.CLAIMS_ACROSS_MODELS_HTML, caption="../report/claims_across_models.rst",
            category="Thesis claims",
        ),
    log:
        "results/logs/claims_across_models.log",
    benchmark:
        "results/benchmarks/claims_across_models.tsv"
    resources:
        **fixed_resources(mem_mb=500, runtime=5),
    script:
        "../scripts/claims_across_models.py"


rule report:
    """Every input of the HTML report: figures, clue tables and the claims. The report itself is
    Snakemake's: `snakemake --cores 2 report --report results/report.html --report-after-run`."""
    localrule: True
    input:
        rules.figures.input,
        rules.claims.output,
        rules.claims_across_models.output if len(PLAN.models) > 1 else [],
