# Monte-Carlo checks of the thesis's formulas (docs/theory.md); config section `theory:`.


rule theory_checks:
    output:
        table=attnscope_paths.THEORY_CHECKS,
        markdown=attnscope_paths.THEORY_CHECKS_MD,
    params:
        theory=lambda wc: config["theory"],
    log:
        "results/logs/theory_checks.log",
    benchmark:
        "results/benchmarks/theory_checks.tsv"
    resources:
        **fixed_resources(mem_mb=2000, runtime=15),
    script:
        "../scripts/theory_checks.py"
