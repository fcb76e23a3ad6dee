# The attention explorer (docs/explorer.md): `snakemake --cores 2 explore` builds the attention
# stores if needed, then serves a web page over them on http://127.0.0.1:8765/ until Ctrl-C
# (an interactive target: the job never finishes). `attnscope explore results` is the same
# server without Snakemake (other ports, hosts, results folders).


rule explore:
    localrule: True
    input:
        rules.attention.input,
    params:
        results=lambda wc: attnscope_paths.RESULTS,
        host="127.0.0.1",
        port=8765,
        color_max_token=config["figures"]["color_max"]["token"],  # None: the CLI's none
        color_max_word=config["figures"]["color_max"]["word"],
    log:
        "results/logs/explore.log",
    shell:
        # the `attnscope` command of this Python (sys.executable: the environment running Snakemake);
        # what it prints goes to the terminal and the log
        f"{sys.executable} -m attnscope.explorer explore"
        " {params.results} --host {params.host} --port {params.port}"
        " --color-max-token {params.color_max_token} --color-max-word {params.color_max_word}"
        " 2>&1 | tee {log}"
