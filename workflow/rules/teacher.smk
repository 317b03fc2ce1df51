rule label_teacher:
    """Label notes with one teacher as if unlabelled: silver spans, metadata, token ledger.

    subset pool: the teacher.parts notes (the silver pool silver_<teacher>);
    subset holdout: the evaluation notes, to compare the teacher with its
    student. GPU rule for a model teacher or a local transformers LLM.
    """
    input:
        unpack(teacher_inputs),
    output:
        labels="results/label_teacher/{corpus}/{teacher}/{subset}/labels.parquet",
        silver="results/label_teacher/{corpus}/{teacher}/{subset}/silver.parquet",
        span_scores="results/label_teacher/{corpus}/{teacher}/{subset}/span_scores.parquet",
        metadata="results/label_teacher/{corpus}/{teacher}/{subset}/metadata.parquet",
        ledger="results/label_teacher/{corpus}/{teacher}/{subset}/ledger.json",
        summary="results/label_teacher/{corpus}/{teacher}/{subset}/summary.json",
    log:
        "logs/label_teacher/{corpus}/{teacher}/{subset}.log",
    benchmark:
        "benchmarks/label_teacher/{corpus}/{teacher}/{subset}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=teacher_gpus,
        mem_mb=8000,
    params:
        settings=teacher_settings,
        parts=teacher_parts,
        model=teacher_model_argument,
        cache_dir=TEACHER_CACHE_DIR,
    shell:
        "synthdeid --log {log:q} label-teacher --notes {input.notes:q} --parts {params.parts}"
        " --teacher {wildcards.teacher:q} --settings {params.settings:q} {params.model}"
        " --cache-dir {params.cache_dir:q} --threads {threads}"
        " --out-dir $(dirname {output.silver:q})"


rule combine_teachers:
    """Combine member teachers' labels into an ensemble teacher's (union or vote per label)."""
    input:
        unpack(ensemble_member_files),
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
        members=ensemble_member_arguments,
        policy=ensemble_policy,
    shell:
        "synthdeid --log {log:q} combine-teachers {params.members} --policy {params.policy:q}"
        " --teacher {wildcards.teacher:q} --out-dir $(dirname {output.silver:q})"


rule evaluate_teacher:
    """Score a teacher's labels against gold: the holdout notes, or its silver pool (label noise)."""
    input:
        gold=rules.split_notes.output.notes,
        labels=teacher_labels_file,
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
        skip=teacher_skip_unpredicted,
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
    shell:
        "synthdeid --log {log:q} evaluate-ner --gold {input.gold:q}"
        " --predictions {input.labels:q} --run teacher:{wildcards.teacher}:{wildcards.subset}"
        " --parts {params.parts:q} {params.skip} --resamples {params.resamples}"
        " --seed {params.seed} --out-dir $(dirname {output.metrics:q})"


rule compare_teacher:
    """Teacher vs student on the gold holdout, per label, with paired tests (SHIELD, Table 2)."""
    input:
        teacher="results/evaluate_teacher/{corpus}/{teacher}/holdout/metrics.json",
        student=student_metrics,
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
        runs=teacher_student_arguments,
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
    shell:
        "synthdeid --log {log:q} compare-teacher {params.runs}"
        " --resamples {params.resamples} --seed {params.seed}"
        " --out-dir $(dirname {output.table:q})"


rule measure_silver_noise:
    """Silver labels against the gold of the same notes: precision and recall with CIs."""
    input:
        silver="results/evaluate_teacher/{corpus}/{teacher}/pool/metrics.json",
    output:
        table="results/compare_teacher/{corpus}/{teacher}/silver_noise.md",
        csv="results/compare_teacher/{corpus}/{teacher}/silver_noise.csv",
        json="results/compare_teacher/{corpus}/{teacher}/silver_noise.json",
        figure=report(
            "results/compare_teacher/{corpus}/{teacher}/silver_noise.png",
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
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
    shell:
        "synthdeid --log {log:q} compare-teacher --silver {wildcards.teacher}=$(dirname {input.silver:q})"
        " --resamples {params.resamples} --seed {params.seed}"
        " --out-dir $(dirname {output.table:q})"
