rule prepare_tabular:
    """Discretize the table of clinical variables by its spec; split it 50/50 (Lorenzo et al. 2026, secs. 2.1-2.2).

    output: prepared.parquet (record_id, split train/holdout, one category
            string per spec variable; nothing else from the source table),
            summary.json (records, splits, domains)
    """
    input:
        unpack(lambda w: tabular.source_files(TABLE_SOURCE)),
        spec=TABULAR["table"]["spec"],
    output:
        prepared="results/prepare_tabular/{table}/prepared.parquet",
        summary="results/prepare_tabular/{table}/summary.json",
    log:
        "logs/prepare_tabular/{table}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        source=as_json(TABLE_SOURCE),
        holdout=TABULAR["table"]["holdout_fraction"],
        seed=TABULAR["table"]["seed"],
    shell:
        "synthdeid --log {log:q} prepare-tabular --source {params.source:q}"
        " --spec {input.spec:q} --holdout-fraction {params.holdout} --seed {params.seed}"
        " --out {output.prepared:q} --summary {output.summary:q}"


rule fit_dp_tabular:
    """Fit MST, AIM (DP, SmartNoise) or GaussianCopula, CTGAN (non-DP, SDV); draw the samples.

    {budget} is eps<epsilon> for a DP synthesizer, non_dp for a baseline.
    output: samples.parquet (record_id, sample, variables; ten independent
            samples by default), privacy.json (epsilon total = preprocessor +
            synthesizer, checked after fitting; delta)
    """
    input:
        prepared=rules.prepare_tabular.output.prepared,
        spec=TABULAR["table"]["spec"],
    output:
        samples="results/fit_dp_tabular/{table}/{synthesizer}/{budget}/samples.parquet",
        privacy="results/fit_dp_tabular/{table}/{synthesizer}/{budget}/privacy.json",
    log:
        "logs/fit_dp_tabular/{table}/{synthesizer}/{budget}.log",
    benchmark:
        "benchmarks/fit_dp_tabular/{table}/{synthesizer}/{budget}.tsv"
    wildcard_constraints:
        synthesizer="|".join(tabular.MAIN_ENV_SYNTHESIZERS),
    conda:
        "../../envs/cpu.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        budget=tabular_budget_arguments,
        options=tabular_options,
        samples=TABULAR["samples"],
        rows=TABULAR["rows"],
        seed=TABULAR["seed"],
    shell:
        "synthdeid --log {log:q} fit-dp-tabular --prepared {input.prepared:q}"
        " --spec {input.spec:q} --synthesizer {wildcards.synthesizer} {params.budget}"
        " --settings {params.options:q} --samples {params.samples} --rows {params.rows}"
        " --seed {params.seed} --out {output.samples:q} --privacy-json {output.privacy:q}"
        " --threads {threads} --no-progress"


rule fit_dp_gan_tabular:
    """Fit SmartNoise's PATE-CTGAN or DP-CTGAN in the dpgan environment (opacus 0.14).

    SmartNoise's GAN path needs opacus 0.14, the DP language model opacus
    1.6 (envs/README.md): this rule family puts the environment's opacus 0.14
    overlay (<env>/opt/dpgan-overlay, built by scripts/setup-env.sh and the
    conda post-deploy script) first on PYTHONPATH. Outputs as fit_dp_tabular.
    GPU rule: one GPU on SLURM.
    """
    input:
        prepared=rules.prepare_tabular.output.prepared,
        spec=TABULAR["table"]["spec"],
    output:
        samples="results/fit_dp_gan_tabular/{table}/{synthesizer}/{budget}/samples.parquet",
        privacy="results/fit_dp_gan_tabular/{table}/{synthesizer}/{budget}/privacy.json",
    log:
        "logs/fit_dp_gan_tabular/{table}/{synthesizer}/{budget}.log",
    benchmark:
        "benchmarks/fit_dp_gan_tabular/{table}/{synthesizer}/{budget}.tsv"
    wildcard_constraints:
        synthesizer="|".join(tabular.DPGAN_ENV_SYNTHESIZERS),
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=6000,
        runtime=120,
    params:
        budget=tabular_budget_arguments,
        options=tabular_options,
        samples=TABULAR["samples"],
        rows=TABULAR["rows"],
        seed=TABULAR["seed"],
    shell:
        'PYTHONPATH="$(dirname "$(dirname "$(command -v synthdeid)")")/opt/dpgan-overlay"'
        " synthdeid --log {log:q} fit-dp-tabular --prepared {input.prepared:q}"
        " --spec {input.spec:q} --synthesizer {wildcards.synthesizer} {params.budget}"
        " --settings {params.options:q} --samples {params.samples} --rows {params.rows}"
        " --seed {params.seed} --out {output.samples:q} --privacy-json {output.privacy:q}"
        " --threads {threads} --no-progress"


rule evaluate_tabular:
    """Compare the synthesizers: fidelity, similarity, novelty over their samples (Lorenzo et al. 2026, Table 1).

    Fidelity (uni-, bi-, trivariate accuracy: 1 - half the L1 distance),
    cosine similarity of row-embedding centroids, identical matches, NNDR,
    DCR share and DCR overfitting score against the 50/50 train / holdout
    split; mean and spread over the samples; the real holdout as reference.
    """
    input:
        unpack(lambda w: tabular.sample_files(TABLE, TABULAR_RUNS, rule_outputs())),
        prepared=rules.prepare_tabular.output.prepared,
        spec=TABULAR["table"]["spec"],
    output:
        json="results/evaluate_tabular/{table}/comparison.json",
        md="results/evaluate_tabular/{table}/comparison.md",
        html=report(
            "results/evaluate_tabular/{table}/comparison.html",
            caption="../report/tabular_comparison.rst",
            category="Synthetic data",
            subcategory="DP tabular synthesis",
            labels={"result": "fidelity and novelty (table)", "dataset": "{table}"},
        ),
        csv="results/evaluate_tabular/{table}/comparison.csv",
        png=report(
            "results/evaluate_tabular/{table}/comparison.png",
            caption="../report/tabular_comparison_figure.rst",
            category="Synthetic data",
            subcategory="DP tabular synthesis",
            labels={"result": "fidelity and novelty (figure)", "dataset": "{table}"},
        ),
    log:
        "logs/evaluate_tabular/{table}.log",
    benchmark:
        "benchmarks/evaluate_tabular/{table}.tsv"
    conda:
        "../../envs/cpu.yaml"
    threads: 2
    params:
        runs=lambda w, input: tabular.run_arguments(TABULAR_RUNS, input),
        settings=as_json(TABULAR["evaluation"]),
        out_dir=folder_of("json"),
    shell:
        "synthdeid --log {log:q} evaluate-tabular --prepared {input.prepared:q}"
        " --spec {input.spec:q} {params.runs} --settings {params.settings:q}"
        " --out-dir {params.out_dir:q} --no-progress"


rule subsample_tabular:
    """The stratified, frequency-weighted subsample of one synthesizer's rows (Lorenzo et al. 2026, sec. 2.3).

    Completeness quartiles, then the most frequent combinations of two
    strata variables with the paper's 60/60/30/30/70 quotas scaled to size.
    """
    input:
        samples=lambda w: tabular.fit_file(TABLE, VERBALIZED, "samples", rule_outputs()),
        spec=TABULAR["table"]["spec"],
    output:
        subsample="results/subsample_tabular/{table}/subsample.parquet",
        stats="results/subsample_tabular/{table}/stats.json",
    log:
        "logs/subsample_tabular/{table}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        strata=TABULAR["subsample"]["strata"],
        size=TABULAR["subsample"]["size"],
        quotas=TABULAR["subsample"]["quotas"],
        seed=TABULAR["subsample"]["seed"],
    shell:
        "synthdeid --log {log:q} subsample-tabular --samples {input.samples:q}"
        " --spec {input.spec:q} --strata {params.strata} --size {params.size}"
        " --quotas {params.quotas} --seed {params.seed}"
        " --out {output.subsample:q} --stats {output.stats:q}"


rule verbalize_tabular:
    """Synthetic rows into reports with PHI placeholders, filled locally into a notes pool.

    Expert rules, then the LLM backend (or, with backend none, a seeded
    grammar, said in the log, the reports table and the pool's source;
    trusted hosts only, a non-DP synthesizer's rows kept on this machine);
    the template validator's checks; local fill at exact offsets.
    output: reports.parquet, pii.parquet / no_pii.parquet (canonical notes,
            split "synthetic"), removals.parquet, summary.json
    """
    input:
        subsample=rules.subsample_tabular.output.subsample,
        spec=TABULAR["table"]["spec"],
        allowlist=TEMPLATE["allowlist"],
        prompt=TABULAR["verbalize"]["prompt"],
    output:
        reports="results/verbalize_tabular/{table}/reports.parquet",
        pii="results/verbalize_tabular/{table}/pii.parquet",
        no_pii="results/verbalize_tabular/{table}/no_pii.parquet",
        removals="results/verbalize_tabular/{table}/removals.parquet",
        summary="results/verbalize_tabular/{table}/summary.json",
    log:
        "logs/verbalize_tabular/{table}.log",
    benchmark:
        "benchmarks/verbalize_tabular/{table}.tsv"
    conda:
        "../../envs/gpu.yaml"
    resources:
        gpu=synthesis.backend_gpus(TABULAR["verbalize"]["backend"]),
    params:
        settings=as_json(tabular.verbalize_settings(TABULAR["verbalize"])),
        cache=LLM_CACHE_DIR,
    shell:
        "synthdeid --log {log:q} verbalize-tabular --subsample {input.subsample:q}"
        " --spec {input.spec:q} --allowlist {input.allowlist:q} --prompt {input.prompt:q}"
        " --settings {params.settings:q} --cache-dir {params.cache:q}"
        " --reports {output.reports:q} --pii {output.pii:q} --no-pii {output.no_pii:q}"
        " --removals {output.removals:q} --summary {output.summary:q} --no-progress"


rule check_faithfulness:
    """Per-variable and document-level faithfulness of the reports (Lorenzo et al. 2026, Tables 2, 3).

    Rule-based checker from the variable spec, or an LLM judge (within the
    endpoint policy: trusted hosts, non-DP rows kept on this machine); the
    row/report pairs with the unfaithful variables dropped (Lorenzo et al. 2026, sec. 4).
    """
    input:
        reports=rules.verbalize_tabular.output.reports,
        spec=TABULAR["table"]["spec"],
        prompt=TABULAR["faithfulness"]["prompt"],
    output:
        json="results/check_faithfulness/{table}/faithfulness.json",
        md="results/check_faithfulness/{table}/faithfulness.md",
        html=report(
            "results/check_faithfulness/{table}/faithfulness.html",
            caption="../report/tabular_faithfulness.rst",
            category="Synthetic data",
            subcategory="DP tabular synthesis",
            labels={"result": "faithfulness (table)", "dataset": "{table}"},
        ),
        csv="results/check_faithfulness/{table}/faithfulness.csv",
        png=report(
            "results/check_faithfulness/{table}/faithfulness.png",
            caption="../report/tabular_faithfulness.rst",
            category="Synthetic data",
            subcategory="DP tabular synthesis",
            labels={"result": "faithfulness (figure)", "dataset": "{table}"},
        ),
        pairs="results/check_faithfulness/{table}/pairs.parquet",
    log:
        "logs/check_faithfulness/{table}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        judge=as_json(TABULAR["faithfulness"]["judge"]),
        policy=as_json(tabular.judge_policy(TABULAR["faithfulness"])),
        cache=LLM_CACHE_DIR,
        out_dir=folder_of("json"),
    shell:
        "synthdeid --log {log:q} check-faithfulness --reports {input.reports:q}"
        " --spec {input.spec:q} --judge-backend {params.judge:q} --judge-policy {params.policy:q}"
        " --judge-prompt {input.prompt:q} --cache-dir {params.cache:q}"
        " --out-dir {params.out_dir:q} --no-progress"


rule extract_tabular:
    """Information extraction: an extractor trained on the faithful pairs, scored on reports of real rows (Lorenzo et al. 2026, sec. 4).

    The fine-tuned extractor (an encoder with one head per variable) and,
    with an LLM backend, the 0-shot and k-shot baselines, all scored on the
    same test reports: the real holdout rows written by the seeded grammar.
    output: extraction.json / .md / .html / .csv / .png (scores only);
            local/predictions.parquet (read from real rows: local-only)
    """
    input:
        pairs=rules.check_faithfulness.output.pairs,
        prepared=rules.prepare_tabular.output.prepared,
        spec=TABULAR["table"]["spec"],
        prompt=TABULAR["extraction"]["prompt"],
    output:
        json="results/extract_tabular/{table}/extraction.json",
        md="results/extract_tabular/{table}/extraction.md",
        html=report(
            "results/extract_tabular/{table}/extraction.html",
            caption="../report/tabular_extraction.rst",
            category="Synthetic data",
            subcategory="DP tabular synthesis",
            labels={"result": "information extraction (table)", "dataset": "{table}"},
        ),
        csv="results/extract_tabular/{table}/extraction.csv",
        png=report(
            "results/extract_tabular/{table}/extraction.png",
            caption="../report/tabular_extraction.rst",
            category="Synthetic data",
            subcategory="DP tabular synthesis",
            labels={"result": "information extraction (figure)", "dataset": "{table}"},
        ),
        predictions="results/extract_tabular/{table}/local/predictions.parquet",
    log:
        "logs/extract_tabular/{table}.log",
    benchmark:
        "benchmarks/extract_tabular/{table}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=4000,
    params:
        settings=as_json(tabular.extraction_settings(TABULAR["extraction"])),
        rules=as_json(TABULAR["verbalize"]["rules"]),
        cache=LLM_CACHE_DIR,
        out_dir=folder_of("json"),
    shell:
        "synthdeid --log {log:q} extract-tabular --pairs {input.pairs:q}"
        " --prepared {input.prepared:q} --spec {input.spec:q} --prompt {input.prompt:q}"
        " --settings {params.settings:q} --rules {params.rules:q} --cache-dir {params.cache:q}"
        " --out-dir {params.out_dir:q} --predictions {output.predictions:q}"
        " --threads {threads} --no-progress"
