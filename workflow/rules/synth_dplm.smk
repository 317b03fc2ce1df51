rule plant_canaries:
    """Write the canary and outlier notes planted in the LM training set (Zecevic et al., sec. 4.6).

    output: canaries.parquet (canary_id, text, distinctive phrase, kind):
            canaries (improbable phrases) and outliers (clinically plausible
            ICU notes, each with a rare but realistic clinical combination),
            from seeded generators; no real data
    """
    output:
        canaries="results/plant_canaries/{corpus}/canaries.parquet",
    log:
        "logs/plant_canaries/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        how_many=DPLM["canaries"]["count"],
        seed=DPLM["canaries"]["seed"],
        outliers=DPLM["outliers"]["count"],
        outlier_seed=DPLM["outliers"]["seed"],
    shell:
        "synthdeid --log {log:q} plant-canaries --count {params.how_many}"
        " --seed {params.seed} --outliers {params.outliers}"
        " --outlier-seed {params.outlier_seed} --out {output.canaries:q}"


rule train_dp_lm:
    """Fine-tune the causal LM on masked seeds + planted notes: DP-SGD (dp) or baseline (non_dp).

    Both models come from the same loop, data, sampler and steps; non_dp only
    drops clipping and noise. The model directory holds the weights, the
    tokenizer, synthdeid_lm.json and privacy.json (epsilon, delta, noise
    multiplier, sample rate, steps, accountant, secure_mode, N), also written
    beside it. A privacy target that cannot be met is refused before training.
    GPU rule: one GPU on SLURM.
    """
    input:
        masked=rules.mask_seeds.output.masked,
        canaries=rules.plant_canaries.output.canaries,
        allowlist=TEMPLATE["allowlist"],
    output:
        model=directory("results/train_dp_lm/{corpus}/{privacy}/model"),
        privacy="results/train_dp_lm/{corpus}/{privacy}/privacy.json",
    log:
        "logs/train_dp_lm/{corpus}/{privacy}.log",
    benchmark:
        "benchmarks/train_dp_lm/{corpus}/{privacy}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=12000,
        runtime=240,
    params:
        settings=lambda w: as_json(synthesis.dplm_training_settings(DPLM, w.privacy)),
        dp=lambda w: "--no-dp" if w.privacy == "non_dp" else "",
    shell:
        "synthdeid --log {log:q} train-dp-lm --masked {input.masked:q}"
        " --canaries {input.canaries:q} --allowlist {input.allowlist:q}"
        " --settings {params.settings:q} {params.dp} --out-dir {output.model:q}"
        " --privacy-json {output.privacy:q} --threads {threads}"


rule sample_dp_lm:
    """Sample the language model by control code; validate and fill the samples into pools.

    output: samples.parquet (every raw sample with its code and the
            validator's verdict), pii.parquet / no_pii.parquet (filled notes,
            exact offsets, split "synthetic"), removals.parquet, summary.json
    GPU rule: one GPU on SLURM (generation); on a CPU it uses the rule's threads.
    """
    input:
        model=rules.train_dp_lm.output.model,
        masked=rules.mask_seeds.output.masked,
        notes=rules.split_notes.output.notes,
        removed=rules.mask_seeds.output.removed,
        allowlist=TEMPLATE["allowlist"],
    output:
        samples="results/sample_dp_lm/{corpus}/{privacy}/samples.parquet",
        pii="results/sample_dp_lm/{corpus}/{privacy}/pii.parquet",
        no_pii="results/sample_dp_lm/{corpus}/{privacy}/no_pii.parquet",
        removals="results/sample_dp_lm/{corpus}/{privacy}/removals.parquet",
        summary="results/sample_dp_lm/{corpus}/{privacy}/summary.json",
    log:
        "logs/sample_dp_lm/{corpus}/{privacy}.log",
    benchmark:
        "benchmarks/sample_dp_lm/{corpus}/{privacy}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=60,
    params:
        settings=as_json(DPLM["sampling"]),
        pools=as_json(DPLM["pools"]),
        seed_parts=config["mask"]["parts"],
    shell:
        "synthdeid --log {log:q} sample-dp-lm --model {input.model:q}"
        " --masked {input.masked:q} --notes {input.notes:q}"
        " --seed-parts {params.seed_parts:q} --removed {input.removed:q}"
        " --allowlist {input.allowlist:q} --settings {params.settings:q}"
        " --pool-settings {params.pools:q} --name {wildcards.privacy}"
        " --samples {output.samples:q} --pii {output.pii:q} --no-pii {output.no_pii:q}"
        " --removals {output.removals:q} --summary {output.summary:q} --threads {threads}"


rule audit_dp_lm:
    """Memorization audit and text quality of the DP and non-DP samples (Zecevic et al., sec. 4.6).

    Max ROUGE-L of every sample against every training note (masked seeds,
    canaries and outliers), its distribution per model (figure), exact and
    near duplicates, the canary test (best ROUGE-L per canary, samples
    reproducing a canary phrase) and the outlier test (max ROUGE-L per
    outlier, samples regenerating its clinical combination) with CIs (figures);
    perplexity of held-out real notes (masked), distinct-n and lengths against
    the real notes.
    """
    input:
        unpack(lambda w: synthesis.audit_inputs(DPLM_MODELS, w.corpus, rule_outputs())),
        masked=rules.mask_seeds.output.masked,
        canaries=rules.plant_canaries.output.canaries,
        notes=rules.split_notes.output.notes,
    output:
        json="results/audit_dp_lm/{corpus}/audit.json",
        md="results/audit_dp_lm/{corpus}/audit.md",
        csv="results/audit_dp_lm/{corpus}/audit.csv",
        html=report(
            "results/audit_dp_lm/{corpus}/audit.html",
            caption="../report/dplm_audit.rst",
            category="Synthetic data",
            subcategory="DP language model",
            labels={"result": "audit tables", "corpus": "{corpus}"},
        ),
        rouge=report(
            "results/audit_dp_lm/{corpus}/max_rouge_l.png",
            caption="../report/dplm_max_rouge_l.rst",
            category="Synthetic data",
            subcategory="DP language model",
            labels={"result": "max ROUGE-L vs training notes", "corpus": "{corpus}"},
        ),
        canaries=report(
            "results/audit_dp_lm/{corpus}/canaries.png",
            caption="../report/dplm_canaries.rst",
            category="Synthetic data",
            subcategory="DP language model",
            labels={"result": "canary ROUGE-L", "corpus": "{corpus}"},
        ),
        outliers=report(
            "results/audit_dp_lm/{corpus}/outliers.png",
            caption="../report/dplm_outliers.rst",
            category="Synthetic data",
            subcategory="DP language model",
            labels={"result": "outlier ROUGE-L", "corpus": "{corpus}"},
        ),
    log:
        "logs/audit_dp_lm/{corpus}.log",
    benchmark:
        "benchmarks/audit_dp_lm/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    threads: 2
    params:
        runs=lambda w, input: synthesis.audit_arguments(DPLM_MODELS, input),
        settings=as_json(DPLM["audit"]),
        out_dir=folder_of("json"),
    shell:
        "synthdeid --log {log:q} audit-dp-lm {params.runs} --masked {input.masked:q}"
        " --canaries {input.canaries:q} --notes {input.notes:q}"
        " --settings {params.settings:q} --out-dir {params.out_dir:q} --threads {threads}"


rule tapt_encoder:
    """Task-adaptive pretraining (Zecevic et al., sec. 4.8.3): continued MLM on the DP samples.

    The de-identification encoder (ner.training.model) after synth.dplm.tapt
    steps of masked-language-model training on the filled DP samples; NER runs
    with `tapt: dplm` start from it. GPU rule: one GPU on SLURM.
    """
    input:
        pii="results/sample_dp_lm/{corpus}/dp/pii.parquet",
        no_pii="results/sample_dp_lm/{corpus}/dp/no_pii.parquet",
    output:
        model=directory("results/tapt_encoder/{corpus}/dplm/model"),
    log:
        "logs/tapt_encoder/{corpus}.log",
    benchmark:
        "benchmarks/tapt_encoder/{corpus}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=12000,
        runtime=120,
    params:
        settings=as_json(
            synthesis.tapt_settings(DPLM["tapt"], NER["training"]["model"])
        ),
    shell:
        "synthdeid --log {log:q} tapt-encoder --corpus {input.pii:q} {input.no_pii:q}"
        " --settings {params.settings:q} --out-dir {output.model:q} --threads {threads}"
