# Clue import: every configured clue file into one table plus a report of rejected rows.


rule import_clues:
    input:
        [entry["path"] for entry in config["data"]["clue_files"]],
    output:
        clues="results/data/clues.parquet",
        report="results/data/import_report.json",
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


rule data:
    input:
        rules.import_clues.output,
