# Weight spectra of every attention and MLP matrix, the base alignment Tr(W_qᵀW_k) per head,
# and the learned-vs-random comparison (docs/spectra.md); config section `spectra:`.

rule weight_spectra:
    """One job per model: every variant of the spectra (trained, spectra.variants, the random one)
    loaded in turn, one model start for them all (docs/performance.md); a changed variant list
    reruns the whole job."""
    input:
        manifest=attnscope_paths.MANIFEST,
    output:
        table=every_spectra_variant(attnscope_paths.SPECTRA),
        zarr=directory(every_spectra_variant(attnscope_paths.SINGULAR_VALUES)),
        alignment=every_spectra_variant(attnscope_paths.ALIGNMENT),
        qk_circuits=every_spectra_variant(attnscope_paths.QK_CIRCUITS),
        ov_circuits=every_spectra_variant(attnscope_paths.OV_CIRCUITS),
    params:
        spectra=lambda wc: attnscope_config.config_slice(
            config, "spectra", attnscope_config.SPECTRA_KEYS
        ),
        model=lambda wc: attnscope_config.model_build_spec(model_spec(wc)),
        variants=PLAN.spectra_variants,  # which outputs, in their order: in no variant's digest
    log:
        "results/logs/weight_spectra/{model}.log",
    benchmark:
        "results/benchmarks/weight_spectra/{model}.tsv"
    threads: MODEL_THREADS
    resources:
        **model_resources("weight_spectra"),
    script:
        "../scripts/weight_spectra.py"


rule spectra_comparison:
    localrule: True
    input:
        trained=attnscope_paths.fill(attnscope_paths.SPECTRA, variant="trained"),
        random=attnscope_paths.fill(attnscope_paths.SPECTRA, variant=PLAN.random_variant),
    output:
        table=attnscope_paths.LEARNED_VS_RANDOM,
        markdown=attnscope_paths.LEARNED_VS_RANDOM_MD,
    params:
        random_variant=PLAN.random_variant,
    log:
        "results/logs/spectra_comparison/{model}.log",
    benchmark:
        "results/benchmarks/spectra_comparison/{model}.tsv"
    resources:
        **fixed_resources(mem_mb=500, runtime=5),
    script:
        "../scripts/spectra_comparison.py"


rule spectra:
    input:
        [
            pattern.format(model=model, variant=variant)
            for model in PLAN.models
            for variant in PLAN.spectra_variants
            for pattern in (
                attnscope_paths.SPECTRA,
                attnscope_paths.SINGULAR_VALUES,
                attnscope_paths.ALIGNMENT,
                attnscope_paths.QK_CIRCUITS,
            )
        ],
        [
            pattern.format(model=model)
            for model in PLAN.models
            for pattern in (attnscope_paths.LEARNED_VS_RANDOM, attnscope_paths.LEARNED_VS_RANDOM_MD)
        ],
