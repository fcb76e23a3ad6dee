# Shared wildcard constraints and helpers: which outputs exist for the selected models,
# experiments and variants, and the config slices rules pass through `params:`.
import re


wildcard_constraints:
    model="|".join(map(re.escape, config["models"])),
    experiment="|".join(map(re.escape, config["experiments"])),
    variant=attnscope_variants.WILDCARD_REGEX,


def model_spec(wildcards):
    return config["models"][wildcards.model]


def load_options(wildcards):
    return attnscope_config.model_load_options(model_spec(wildcards))


def runs(pattern, **extra):
    """Expand `pattern` over every selected model × experiment × that experiment's variants."""
    return [
        pattern.format(model=model, experiment=experiment, variant=variant, **extra)
        for model in PLAN.models
        for experiment in config["experiments"]
        for variant in PLAN.variants[experiment]
    ]
