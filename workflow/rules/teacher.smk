rule label_teacher:
    """Label notes with one teacher as if unlabelled: silver spans, metadata, token ledger.

    subset pool: the teacher.parts notes (the silver pool silver_<teacher>);
    subset holdout: the evaluation notes, to compare the teacher with its
    student. GPU rule for a model teacher or a local transformers LLM.
    With shards.label_teacher N > 1: one job per row range of the selected
    notes, each writing its shard of every file (labels.shard-K-of-N.parquet ...),
    joined by gather_label_teacher. The shards share the answer cache.
    """
    input:
        unpack(lambda w: TEACHERS.inputs(w.teacher, w.corpus, RUNS, rule_outputs())),
    output:
        labels=sharded(
            "results/label_teacher/{corpus}/{teacher}/{subset}/labels.parquet",
            SHARDS["label_teacher"],
        ),
        silver=sharded(
            "results/label_teacher/{corpus}/{teacher}/{subset}/silver.parquet",
            SHARDS["label_teacher"],
        ),
        span_scores=sharded(
            "results/label_teacher/{corpus}/{teacher}/{subset}/span_scores.parquet",
            SHARDS["label_teacher"],
        ),
        metadata=sharded(
            "results/label_teacher/{corpus}/{teacher}/{subset}/metadata.parquet",
            SHARDS["label_teacher"],
        ),
        ledger=sharded(
            "results/label_teacher/{corpus}/{teacher}/{subset}/ledger.json",
            SHARDS["label_teacher"],
        ),
        summary=sharded(
            "results/label_teacher/{corpus}/{teacher}/{subset}/summary.json",
            SHARDS["label_teacher"],
        ),
    log:
        sharded(
            "logs/label_teacher/{corpus}/{teacher}/{subset}.log",
            SHARDS["label_teacher"],
        ),
    benchmark:
        sharded(
            "benchmarks/label_teacher/{corpus}/{teacher}/{subset}.tsv",
            SHARDS["label_teacher"],
        )
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=lambda w: TEACHERS.gpus(w.teacher),
        mem_mb=8000,
    params:
        settings=lambda w: as_json(TEACHERS.settings(w.teacher)),
        parts=teacher_parts,
        model=lambda w, input: teachers.model_argument(input),
        cache_dir=TEACHER_CACHE_DIR,
        out_dir=folder_of("silver"),
        shard=shard_flag,
    shell:
        "synthdeid --log {log:q} label-teacher --notes {input.notes:q} --parts {params.parts}"
        " --teacher {wildcards.teacher:q} --settings {params.settings:q} {params.model}"
        " --cache-dir {params.cache_dir:q} --threads {threads}"
        " --out-dir {params.out_dir:q} {params.shard}"


rule gather_label_teacher:
    """Join the shards of label_teacher (shards.label_teacher > 1) into one teacher folder.

    The same bytes as one label_teacher job: rows in shard order, summary
    counts added up, the ledger recomputed from the summed tokens (synthdeid.shards).
    """
    input:
        labels=shard_inputs(
            "results/label_teacher/{corpus}/{teacher}/{subset}/labels.parquet",
            SHARDS["label_teacher"],
        ),
        silver=shard_inputs(
            "results/label_teacher/{corpus}/{teacher}/{subset}/silver.parquet",
            SHARDS["label_teacher"],
        ),
        span_scores=shard_inputs(
            "results/label_teacher/{corpus}/{teacher}/{subset}/span_scores.parquet",
            SHARDS["label_teacher"],
        ),
        metadata=shard_inputs(
            "results/label_teacher/{corpus}/{teacher}/{subset}/metadata.parquet",
            SHARDS["label_teacher"],
        ),
        ledger=shard_inputs(
            "results/label_teacher/{corpus}/{teacher}/{subset}/ledger.json",
            SHARDS["label_teacher"],
        ),
        summary=shard_inputs(
            "results/label_teacher/{corpus}/{teacher}/{subset}/summary.json",
            SHARDS["label_teacher"],
        ),
    output:
        labels="results/label_teacher/{corpus}/{teacher}/{subset}/labels.parquet",
        silver="results/label_teacher/{corpus}/{teacher}/{subset}/silver.parquet",
        span_scores="results/label_teacher/{corpus}/{teacher}/{subset}/span_scores.parquet",
        metadata="results/label_teacher/{corpus}/{teacher}/{subset}/metadata.parquet",
        ledger="results/label_teacher/{corpus}/{teacher}/{subset}/ledger.json",
        summary="results/label_teacher/{corpus}/{teacher}/{subset}/summary.json",
    log:
        "logs/label_teacher/{corpus}/{teacher}/{subset}.gather.log",
    benchmark:
        "benchmarks/label_teacher/{corpus}/{teacher}/{subset}.gather.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        shards=SHARDS["label_teacher"],
    shell:
        "synthdeid --log {log:q} gather-shards --count {params.shards} {output:q}"


ruleorder: label_teacher > gather_label_teacher


rule combine_teachers:
    """Combine member teachers' labels into an ensemble teacher's (union or vote per label)."""
    input:
        unpack(
            lambda w: TEACHERS.member_files(
                w.teacher, w.subset, w.corpus, rule_outputs()
            )
        ),
    output:
        labels="results/combine_teachers/{corpus}/{teacher}/{subset}/labels.parquet",
        silver="results/combine_teachers/{corpus}/{teacher}/{subset}/silver.parquet",
        span_scores="results/combine_teachers/{corpus}/{teacher}/{subset}/span_scores.parquet",
        metadata="results/combine_teachers/{corpus}/{teacher}/{subset}/metadata.parquet",
        ledger="results/combine_teachers/{corpus}/{teacher}/{subset}/ledger.json",
        summary="results/combine_teachers/{corpus}/{teacher}/{subset}/summary.json",
    log:
        "logs/combine_teachers/{corpus}/{teacher}/{subset}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        members=lambda w, input: TEACHERS.member_arguments(w.teacher, input),
        policy=lambda w: as_json(TEACHERS.entries[w.teacher].get("policy") or {}),
        out_dir=folder_of("silver"),
    shell:
        "synthdeid --log {log:q} combine-teachers {params.members} --policy {params.policy:q}"
        " --teacher {wildcards.teacher:q} --out-dir {params.out_dir:q}"


rule evaluate_teacher:
    """Score a teacher's labels against gold: the holdout notes, or its silver pool (label noise)."""
    input:
        gold=rules.split_notes.output.notes,
        labels=lambda w: TEACHERS.labels_file(
            w.teacher, w.subset, w.corpus, rule_outputs()
        ),
    output:
        metrics="results/evaluate_teacher/{corpus}/{teacher}/{subset}/metrics.json",
        table="results/evaluate_teacher/{corpus}/{teacher}/{subset}/metrics.md",
        html="results/evaluate_teacher/{corpus}/{teacher}/{subset}/metrics.html",
        csv="results/evaluate_teacher/{corpus}/{teacher}/{subset}/metrics.csv",
        per_document="results/evaluate_teacher/{corpus}/{teacher}/{subset}/per_document.parquet",
        figure="results/evaluate_teacher/{corpus}/{teacher}/{subset}/per_label_recall.png",
    log:
        "logs/evaluate_teacher/{corpus}/{teacher}/{subset}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        parts=teacher_parts,
        skip=lambda w: "--skip-unpredicted" if w.subset == "pool" else "",
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
        out_dir=folder_of("metrics"),
    shell:
        "synthdeid --log {log:q} evaluate-ner --gold {input.gold:q}"
        " --predictions {input.labels:q} --run teacher:{wildcards.teacher}:{wildcards.subset}"
        " --parts {params.parts:q} {params.skip} --resamples {params.resamples}"
        " --seed {params.seed} --out-dir {params.out_dir:q}"


rule compare_teacher:
    """Teacher vs student on the gold holdout, per label, with paired tests (SHIELD, Table 2)."""
    input:
        teacher="results/evaluate_teacher/{corpus}/{teacher}/holdout/metrics.json",
        student=refusing(
            lambda w: TEACHERS.student_metrics(
                w.teacher, w.corpus, RUNS, rule_outputs()
            )
        ),
    output:
        table="results/compare_teacher/{corpus}/{teacher}/distillation.md",
        html=report(
            "results/compare_teacher/{corpus}/{teacher}/distillation.html",
            caption="../report/distillation_table.rst",
            category="Teacher labelling",
            subcategory="{teacher}",
            labels={"result": "teacher vs student (table)", "teacher": "{teacher}"},
        ),
        csv="results/compare_teacher/{corpus}/{teacher}/distillation.csv",
        json="results/compare_teacher/{corpus}/{teacher}/distillation.json",
        figure=report(
            "results/compare_teacher/{corpus}/{teacher}/distillation.png",
            caption="../report/distillation.rst",
            category="Teacher labelling",
            subcategory="{teacher}",
            labels={"result": "teacher vs student", "teacher": "{teacher}"},
        ),
    log:
        "logs/compare_teacher/{corpus}/{teacher}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        runs=lambda w, input: TEACHERS.distillation_arguments(w.teacher, RUNS, input),
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
        out_dir=folder_of("table"),
    shell:
        "synthdeid --log {log:q} compare-teacher {params.runs}"
        " --resamples {params.resamples} --seed {params.seed}"
        " --out-dir {params.out_dir:q}"


rule measure_silver_noise:
    """Silver labels against the gold of the same notes: precision and recall with CIs."""
    input:
        silver="results/evaluate_teacher/{corpus}/{teacher}/pool/metrics.json",
    output:
        table="results/measure_silver_noise/{corpus}/{teacher}/silver_noise.md",
        csv="results/measure_silver_noise/{corpus}/{teacher}/silver_noise.csv",
        json="results/measure_silver_noise/{corpus}/{teacher}/silver_noise.json",
        figure=report(
            "results/measure_silver_noise/{corpus}/{teacher}/silver_noise.png",
            caption="../report/silver_noise.rst",
            category="Teacher labelling",
            subcategory="{teacher}",
            labels={"result": "silver-label noise", "teacher": "{teacher}"},
        ),
    log:
        "logs/measure_silver_noise/{corpus}/{teacher}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        silver=lambda w, input: teachers.silver_argument(w.teacher, input.silver),
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
        out_dir=folder_of("table"),
    shell:
        "synthdeid --log {log:q} compare-teacher {params.silver}"
        " --resamples {params.resamples} --seed {params.seed}"
        " --out-dir {params.out_dir:q}"
