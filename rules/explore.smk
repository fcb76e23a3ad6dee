# The attention explorer (docs/explorer.md): `snakemake --cores 2 explore` builds the attention
# stores if needed, then serves a web page over them on http://127.0.0.1:8765/ until Ctrl-C
# (an interactive target: the job never finishes). `attnscope explore results` is the same
# server without Snakemake (other ports, hosts, results folders).


def _scale(value):
    return "none" if value is None else value


rule explore:
    localrule: True
    input:
        rules.attention.input,
    params:
        results="results",
        host="127.0.0.1",
        port=8765,
        color_max_token=_scale(config["figures"]["color_max"]["token"]),
        color_max_word=_scale(config["figures"]["color_max"]["word"]),
    shell:
        # the `attnscope` command of this Python (sys.executable: the environment running Snakemake)
        f"{sys.executable} -m attnscope.explorer explore {params.results} --host {params.host} --port {params.port}"
        " --color-max-token {params.color_max_token} --color-max-word {params.color_max_word}"
