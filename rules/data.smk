# Clue import: every configured clue file into one table plus a report of rejected rows.


rule import_clues:
    localrule: True
    input:
        [entry["path"] for entry in config["data"]["clue_files"]],
    output:
        clues=attnscope_paths.IMPORTED_CLUES,
        report=attnscope_paths.IMPORT_REPORT,
    params:
        clue_files=config["data"]["clue_files"],
    log:
        "results/logs/import_clues.log",
    benchmark:
        "results/benchmarks/import_clues.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/import_clues.py"


rule check_targets:
    localrule: True
    input:
        clues=attnscope_paths.IMPORTED_CLUES,
        report=attnscope_paths.IMPORT_REPORT,
    output:
        report=attnscope_paths.TARGET_REPORT,
    params:
        category=lambda wc: experiment_plan(wc).category,
        targets=lambda wc: experiment_plan(wc).targets,
    log:
        "results/logs/check_targets/{experiment}.log",
    benchmark:
        "results/benchmarks/check_targets/{experiment}.tsv"
    resources:
        **fixed_resources(mem_mb=1000, runtime=10),
    script:
        "../scripts/check_targets.py"


rule data:
    input:
        rules.import_clues.output,
        expand(rules.check_targets.output.report, experiment=PLAN.experiments),
