rule generate_templates:
    """Rewrite masked seeds into templates with an LLM backend, validated (VetSynth).

    input:  masked.parquet and removed_values.parquet (mask_seeds), the
            placeholder allowlist and the versioned prompt file
    output: templates.parquet (every attempt: variant, status, rejection reason,
            template, request hash, tokens), summary.json (acceptance rate,
            rejections by reason, guard refusals, tokens) and, local-only,
            local/templates.sent_requests.parquet (every request sent)
    Only masked text is sent, and every request passes the guard first (no
    seed PHI surface, nothing identifier-like). Backend none sends nothing:
    each masked seed is its own template. Responses are cached by request
    hash in cache/llm_responses/, so a rerun sends nothing it already sent.
    With backend transformers it is a GPU rule (gpu=1 on SLURM); otherwise it
    asks for no GPU.
    With shards.generate_templates N > 1: one job per row range of the planned
    requests (seed x variant x copy), each writing its shard of every output
    (templates.shard-K-of-N.parquet ...), joined by gather_generate_templates.
    The shards share the answer cache.
    """
    input:
        masked=rules.mask_seeds.output.masked,
        removed=rules.mask_seeds.output.removed,
        allowlist=TEMPLATE["allowlist"],
        prompt=TEMPLATE["prompt"],
    output:
        templates=sharded(
            "results/generate_templates/{corpus}/templates.parquet",
            SHARDS["generate_templates"],
        ),
        summary=sharded(
            "results/generate_templates/{corpus}/summary.json",
            SHARDS["generate_templates"],
        ),
        sent=sharded(
            "results/generate_templates/{corpus}/local/templates.sent_requests.parquet",
            SHARDS["generate_templates"],
        ),
    log:
        sharded("logs/generate_templates/{corpus}.log", SHARDS["generate_templates"]),
    benchmark:
        sharded(
            "benchmarks/generate_templates/{corpus}.tsv", SHARDS["generate_templates"]
        )
    conda:
        "../../envs/gpu.yaml"
    resources:
        gpu=synthesis.backend_gpus(TEMPLATE["backend"]),
    params:
        settings=as_json(synthesis.template_settings(TEMPLATE)),
        cache_dir=LLM_CACHE_DIR,
        shard=shard_flag,
    shell:
        "synthdeid --log {log:q} generate-templates --masked {input.masked:q}"
        " --removed {input.removed:q} --allowlist {input.allowlist:q}"
        " --prompt {input.prompt:q} --settings {params.settings:q}"
        " --cache-dir {params.cache_dir:q} --out {output.templates:q}"
        " --summary {output.summary:q} --sent-requests {output.sent:q} {params.shard}"


rule gather_generate_templates:
    """Join the shards of generate_templates (shards.generate_templates > 1).

    The same bytes as one generate_templates job: rows in shard order (the
    sent requests local-only, as the shards are), summary counts added up,
    acceptance rates recomputed from the summed counts (synthdeid.shards).
    """
    input:
        templates=shard_inputs(
            "results/generate_templates/{corpus}/templates.parquet",
            SHARDS["generate_templates"],
        ),
        summary=shard_inputs(
            "results/generate_templates/{corpus}/summary.json",
            SHARDS["generate_templates"],
        ),
        sent=shard_inputs(
            "results/generate_templates/{corpus}/local/templates.sent_requests.parquet",
            SHARDS["generate_templates"],
        ),
    output:
        templates="results/generate_templates/{corpus}/templates.parquet",
        summary="results/generate_templates/{corpus}/summary.json",
        sent="results/generate_templates/{corpus}/local/templates.sent_requests.parquet",
    log:
        "logs/generate_templates/{corpus}.gather.log",
    benchmark:
        "benchmarks/generate_templates/{corpus}.gather.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        shards=SHARDS["generate_templates"],
    shell:
        "synthdeid --log {log:q} gather-shards --count {params.shards} {output:q}"


ruleorder: generate_templates > gather_generate_templates


rule fill_templates:
    """Fill accepted templates locally (exact offsets), dedup, screen; write the pools.

    input:  templates.parquet, the split notes (seed notes to dedup against),
            removed_values.parquet (the seed PHI surfaces to screen for)
    output: pii.parquet and no_pii.parquet (canonical notes schema, split
            "synthetic"), removals.parquet (what each step dropped and why),
            summary.json
    """
    input:
        templates=rules.gather_generate_templates.output.templates,
        notes=rules.split_notes.output.notes,
        removed=rules.mask_seeds.output.removed,
        allowlist=TEMPLATE["allowlist"],
    output:
        pii="results/fill_templates/{corpus}/pii.parquet",
        no_pii="results/fill_templates/{corpus}/no_pii.parquet",
        removals="results/fill_templates/{corpus}/removals.parquet",
        summary="results/fill_templates/{corpus}/summary.json",
    log:
        "logs/fill_templates/{corpus}.log",
    benchmark:
        "benchmarks/fill_templates/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        settings=as_json(TEMPLATE["pools"]),
        seed_parts=config["mask"]["parts"],
    shell:
        "synthdeid --log {log:q} fill-templates --templates {input.templates:q}"
        " --notes {input.notes:q} --seed-parts {params.seed_parts:q}"
        " --removed {input.removed:q} --allowlist {input.allowlist:q}"
        " --settings {params.settings:q} --pii {output.pii:q} --no-pii {output.no_pii:q}"
        " --removals {output.removals:q} --summary {output.summary:q}"


use rule generate_templates as generate_control_templates with:
    # The control of an LLM template pool: backend none on the same seeds (each
    # masked seed its own template), for mixtures that pool template_none. One
    # job whatever shards.generate_templates: it sends nothing.
    output:
        templates="results/generate_control_templates/{corpus}/templates.parquet",
        summary="results/generate_control_templates/{corpus}/summary.json",
        sent="results/generate_control_templates/{corpus}/local/templates.sent_requests.parquet",
    log:
        "logs/generate_control_templates/{corpus}.log",
    benchmark:
        "benchmarks/generate_control_templates/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    resources:
        gpu=0,
    # cache_dir and shard are generate_templates' (use rule ... with: replaces only the
    # params it names; input, output and log it replaces whole)
    params:
        settings=as_json(
            synthesis.template_settings(TEMPLATE, backend={"kind": "none"})
        ),


use rule fill_templates as fill_control_templates with:
    # backend none's templates are the seeds: no dedup against them (see synth.template.pools)
    input:
        templates=rules.generate_control_templates.output.templates,
        notes=rules.split_notes.output.notes,
        removed=rules.mask_seeds.output.removed,
        allowlist=TEMPLATE["allowlist"],
    output:
        pii="results/fill_control_templates/{corpus}/pii.parquet",
        no_pii="results/fill_control_templates/{corpus}/no_pii.parquet",
        removals="results/fill_control_templates/{corpus}/removals.parquet",
        summary="results/fill_control_templates/{corpus}/summary.json",
    log:
        "logs/fill_control_templates/{corpus}.log",
    benchmark:
        "benchmarks/fill_control_templates/{corpus}.tsv"
    params:
        settings=as_json({**TEMPLATE["pools"], "against_seeds": False}),


rule diagnose_synthetic:
    """Synthetic-vs-real diagnostics (VetSynth, Tables 1, 3, 4; SHIELD, section 2.3).

    input:  split notes (real train and holdout parts), the PII and no-PII pools
    output: diagnostics.json/.md/.csv (notes, PII notes, words and characters
            median [IQR], spans, label shares, PII notes without a person,
            within-note repetition; unigram JSD and Frechet distance of MiniLM
            embeddings against the real train part), lengths.png, labels.png
    """
    input:
        notes=rules.split_notes.output.notes,
        pii=rules.fill_templates.output.pii,
        no_pii=rules.fill_templates.output.no_pii,
    output:
        json="results/diagnose_synthetic/{corpus}/diagnostics.json",
        md="results/diagnose_synthetic/{corpus}/diagnostics.md",
        csv="results/diagnose_synthetic/{corpus}/diagnostics.csv",
        html=report(
            "results/diagnose_synthetic/{corpus}/diagnostics.html",
            caption="../report/synthetic_tables.rst",
            category="Synthetic data",
            subcategory="template",
            labels={"result": "diagnostics tables", "corpus": "{corpus}"},
        ),
        lengths=report(
            "results/diagnose_synthetic/{corpus}/lengths.png",
            caption="../report/synthetic_lengths.rst",
            category="Synthetic data",
            subcategory="template",
            labels={"result": "note lengths", "corpus": "{corpus}"},
        ),
        labels=report(
            "results/diagnose_synthetic/{corpus}/labels.png",
            caption="../report/synthetic_labels.rst",
            category="Synthetic data",
            subcategory="template",
            labels={"result": "label counts", "corpus": "{corpus}"},
        ),
    log:
        "logs/diagnose_synthetic/{corpus}.log",
    benchmark:
        "benchmarks/diagnose_synthetic/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        out_dir=folder_of("json"),
    shell:
        "synthdeid --log {log:q} diagnose-synthetic"
        ' --subset "real train={input.notes}:train"'
        ' --subset "synthetic (all)={input.pii}" --subset "synthetic (all)={input.no_pii}"'
        ' --derive "synthetic PII=synthetic (all):pii"'
        ' --derive "synthetic no-PII=synthetic (all):no-pii"'
        ' --subset "real holdout={input.notes}:holdout"'
        ' --reference "real train" --out-dir {params.out_dir:q}'
