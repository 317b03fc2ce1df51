rule mask_seeds:
    """Replace the PHI of seed notes by typed, numbered placeholders.

    input:  split notes.parquet
    output: masked.parquet (placeholder spans), summary.json;
            local/removed_values.parquet (the original surfaces: local only,
            never sent anywhere, released or read by the report)
    """
    input:
        notes=rules.split_notes.output.notes,
    output:
        masked="results/mask_seeds/{corpus}/masked.parquet",
        removed="results/mask_seeds/{corpus}/local/removed_values.parquet",
        summary="results/mask_seeds/{corpus}/summary.json",
    log:
        "logs/mask_seeds/{corpus}.log",
    benchmark:
        "benchmarks/mask_seeds/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        parts=config["mask"]["parts"],
        label_view=config["mask"]["label_view"],
        propagate="--propagate" if config["mask"]["propagate"] else "--no-propagate",
        coarse_view=COARSE_VIEW,
    shell:
        "synthdeid --log {log:q} mask-seeds --notes {input.notes:q} --parts {params.parts:q}"
        " --label-view {params.label_view:q} --coarse-view {params.coarse_view:q}"
        " {params.propagate} --out {output.masked:q} --removed {output.removed:q}"
        " --summary {output.summary:q}"
