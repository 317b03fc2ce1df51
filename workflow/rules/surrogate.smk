rule replace_surrogates:
    """Replace the gold PHI spans of the split corpus by keyed surrogates (a releasable corpus).

    input:  split notes.parquet
    output: notes.parquet (surrogate text, re-projected spans), summary.json;
            local/ (local only, never released or read by the report):
            offsets.parquet (original -> surrogate offsets of every span),
            leftovers.json (original surfaces still in the text)
    The secret comes from surrogate.key_file or $SYNTHDEID_SECRET; only its
    fingerprint is a parameter (so a new key reruns this branch).
    """
    input:
        notes=rules.split_notes.output.notes,
    output:
        notes="results/replace_surrogates/{corpus}/notes.parquet",
        summary="results/replace_surrogates/{corpus}/summary.json",
        offsets="results/replace_surrogates/{corpus}/local/offsets.parquet",
        leftovers="results/replace_surrogates/{corpus}/local/leftovers.json",
    log:
        "logs/replace_surrogates/{corpus}.log",
    benchmark:
        "benchmarks/replace_surrogates/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        labels=config["surrogate"]["labels"],
        policies=as_json(config["surrogate"]["policies"]),
        consistency=config["surrogate"]["consistency"],
        key_file=config["surrogate"]["key_file"] or "",
        # a new key reruns replace_surrogates
        key_fingerprint=lambda w: key_fingerprint(
            config["surrogate"]["key_file"], "replace_surrogates"
        ),
    shell:
        "synthdeid --log {log:q} replace-surrogates {input.notes:q} {output.notes:q}"
        " --labels {params.labels:q} --policies {params.policies:q}"
        " --consistency {params.consistency:q} --key-file={params.key_file:q}"
        " --summary {output.summary:q} --leftovers {output.leftovers:q}"
        " --offsets {output.offsets:q}"
