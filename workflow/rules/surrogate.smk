rule replace_surrogates:
    """Replace the gold PHI spans of the split corpus by keyed surrogates (a releasable corpus).

    input:  split notes.parquet
    output: notes.parquet (surrogate text, re-projected spans), summary.json;
            local/ (local only, never released or read by the report):
            offsets.parquet (original -> surrogate offsets of every span),
            leftovers.json (original surfaces still in the text)
    The secret comes from surrogate.key_file or $SYNTHDEID_SECRET; only its
    fingerprint is a parameter (so a new key reruns this branch).
    With shards.replace_surrogates N > 1: one job per row range, each writing
    its shard (notes.shard-K-of-N.parquet ...), joined by gather_replace_surrogates.
    """
    input:
        notes=rules.split_notes.output.notes,
    output:
        notes=sharded(
            "results/replace_surrogates/{corpus}/notes.parquet",
            SHARDS["replace_surrogates"],
        ),
        summary=sharded(
            "results/replace_surrogates/{corpus}/summary.json",
            SHARDS["replace_surrogates"],
        ),
        offsets=sharded(
            "results/replace_surrogates/{corpus}/local/offsets.parquet",
            SHARDS["replace_surrogates"],
        ),
        leftovers=sharded(
            "results/replace_surrogates/{corpus}/local/leftovers.json",
            SHARDS["replace_surrogates"],
        ),
    log:
        sharded("logs/replace_surrogates/{corpus}.log", SHARDS["replace_surrogates"]),
    benchmark:
        sharded(
            "benchmarks/replace_surrogates/{corpus}.tsv", SHARDS["replace_surrogates"]
        )
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
        shard=shard_flag,
    shell:
        "synthdeid --log {log:q} replace-surrogates {input.notes:q} {output.notes:q}"
        " --labels {params.labels:q} --policies {params.policies:q}"
        " --consistency {params.consistency:q} --key-file={params.key_file:q}"
        " --summary {output.summary:q} --leftovers {output.leftovers:q}"
        " --offsets {output.offsets:q} {params.shard}"


rule gather_replace_surrogates:
    """Join the shards of replace_surrogates (shards.replace_surrogates > 1) into its outputs.

    The same bytes as one replace_surrogates job: rows in shard order, summary
    counts added up (synthdeid.shards).
    """
    input:
        notes=shard_inputs(
            "results/replace_surrogates/{corpus}/notes.parquet",
            SHARDS["replace_surrogates"],
        ),
        summary=shard_inputs(
            "results/replace_surrogates/{corpus}/summary.json",
            SHARDS["replace_surrogates"],
        ),
        offsets=shard_inputs(
            "results/replace_surrogates/{corpus}/local/offsets.parquet",
            SHARDS["replace_surrogates"],
        ),
        leftovers=shard_inputs(
            "results/replace_surrogates/{corpus}/local/leftovers.json",
            SHARDS["replace_surrogates"],
        ),
    output:
        notes="results/replace_surrogates/{corpus}/notes.parquet",
        summary="results/replace_surrogates/{corpus}/summary.json",
        offsets="results/replace_surrogates/{corpus}/local/offsets.parquet",
        leftovers="results/replace_surrogates/{corpus}/local/leftovers.json",
    log:
        "logs/replace_surrogates/{corpus}.gather.log",
    benchmark:
        "benchmarks/replace_surrogates/{corpus}.gather.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        shards=SHARDS["replace_surrogates"],
    shell:
        "synthdeid --log {log:q} gather-shards --count {params.shards} {output.notes:q}"
        " {output.summary:q} {output.offsets:q} {output.leftovers:q}"


ruleorder: replace_surrogates > gather_replace_surrogates
