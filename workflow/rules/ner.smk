rule build_mixture:
    """Draw one run's training mixture: real train notes plus its labelled pools (VetSynth, sec. 2.5).

    input:  split notes.parquet, the run's pools (and, for the surrogates pool, its
            local id map: the mixture keeps the original ids)
    output: train.parquet (notes + pool + copies), validation.parquet (real
            patients held out), summary.json (realized sizes, VetSynth Table 2)
    """
    input:
        unpack(
            lambda w: pools.pool_files(
                POOLS, NER_RUNS[w.run]["pools"], w.corpus, rule_outputs()
            )
        ),
        unpack(
            lambda w: pools.pool_id_files(
                POOLS, NER_RUNS[w.run]["pools"], w.corpus, rule_outputs()
            )
        ),
        notes=rules.split_notes.output.notes,
    output:
        train="results/build_mixture/{corpus}/{run}/train.parquet",
        validation="results/build_mixture/{corpus}/{run}/validation.parquet",
        summary="results/build_mixture/{corpus}/{run}/summary.json",
    log:
        "logs/build_mixture/{corpus}/{run}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        spec=lambda w: as_json(NER_RUNS[w.run]["mixture"]),
        pools=lambda w, input: pools.pool_arguments(NER_RUNS[w.run]["pools"], input),
        pool_ids=lambda w, input: pools.pool_id_arguments(
            NER_RUNS[w.run]["pools"], input
        ),
        pool_parts=lambda w: pools.pool_parts(POOLS, NER_RUNS[w.run]["pools"]),
    shell:
        "synthdeid --log {log:q} build-mixture --notes {input.notes:q} {params.pools}"
        " {params.pool_ids}"
        " --pool-parts {params.pool_parts:q} --spec {params.spec:q}"
        " --out-train {output.train:q} --out-validation {output.validation:q}"
        " --summary {output.summary:q}"


checkpoint plan_runs:
    """Find trained runs that would train the same model: identical mixtures and settings.

    An arm whose every run repeats a run of one other arm (say fixed_n at real share
    1.0 and the size of the real train part, which is real_only) is degenerate: it is
    reported once, as that arm, and not trained (docs/stages/ner.md, "Degenerate arms").
    input:  each trained run's build_mixture summary.json (its mixture digest)
    output: plan.json (duplicate runs, degenerate arms, the runs not trained)
    """
    input:
        unpack(lambda w: ner_inputs.plan_inputs(RUNS, w.corpus, rule_outputs())),
    output:
        plan="results/plan_runs/{corpus}/plan.json",
    log:
        "logs/plan_runs/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        # compared by Snakemake (not derived from the input): changed settings rerun the plan
        runs=ner_inputs.plan_arguments(RUNS, PROTECTED_RUNS),
        mixtures=lambda w, input: ner_inputs.plan_mixture_arguments(RUNS, input),
    shell:
        "synthdeid --log {log:q} plan-runs {params.mixtures} {params.runs}"
        " --out {output.plan:q}"


rule tapt_encoder_own:
    """Task-adaptive pretraining on one run's own training notes (runs with `tapt: own`).

    The run's encoder after ner.tapt steps of masked-language-model training on
    the text of its mixture's training notes (labels unused; the validation
    notes stay out). train_ner then starts from it. GPU rule: one GPU on SLURM.
    """
    input:
        train=rules.build_mixture.output.train,
    output:
        model=directory("results/tapt_encoder_own/{corpus}/{run}/model"),
    log:
        "logs/tapt_encoder_own/{corpus}/{run}.log",
    benchmark:
        "benchmarks/tapt_encoder_own/{corpus}/{run}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=12000,
        runtime=120,
    params:
        settings=lambda w: as_json(
            synthesis.tapt_settings(NER["tapt"], RUNS.training(w.run)["model"])
        ),
    shell:
        "synthdeid --log {log:q} tapt-encoder --corpus {input.train:q}"
        " --settings {params.settings:q} --out-dir {output.model:q} --threads {threads}"


rule tapt_encoder_seeds:
    """Task-adaptive pretraining on the seed notes' text, masked or with surrogates (runs with `tapt: seeds_masked` / `seeds_surrogates`).

    The pseudo-data ablation (PseudoData): the same notes and ner.tapt
    settings, once with placeholders ([[DOCTOR_1]]) where the PHI was and once
    with keyed surrogate PHI, so the two encoders differ only in that text.
    GPU rule: one GPU on SLURM.
    """
    input:
        notes=lambda w: rule_outputs().path(
            pools.SEED_TEXT_NOTES[w.text], corpus=w.corpus
        ),
    output:
        model=directory("results/tapt_encoder_seeds/{corpus}/{text}/model"),
    log:
        "logs/tapt_encoder_seeds/{corpus}/{text}.log",
    benchmark:
        "benchmarks/tapt_encoder_seeds/{corpus}/{text}.tsv"
    wildcard_constraints:
        text="masked|surrogates",
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=12000,
        runtime=120,
    params:
        parts=config["mask"]["parts"],
        settings=as_json(synthesis.tapt_settings(NER["tapt"], NER["training"]["model"])),
    shell:
        "synthdeid --log {log:q} tapt-encoder --corpus {input.notes:q} --parts {params.parts:q}"
        " --settings {params.settings:q} --out-dir {output.model:q} --threads {threads}"


rule soft_label_ner:
    """A teacher run's soft labels on a distilled run's training notes (runs with `distill_from`).

    The teacher (a trained, ensemble or stacked run) gives every token of the
    distinct notes of the student's mixture train.parquet its tag probabilities,
    kept with the teacher tokens' character offsets (the student's tokenizer may
    differ); train_ner learns them with the gold tags. GPU rule: one GPU on SLURM
    (the teacher may be a 12-layer model, or several); on a CPU it uses the
    rule's threads.
    output: local/soft_labels.parquet (LOCAL ONLY: no text, but where the
            teacher saw PHI in real notes)
    """
    input:
        teacher=lambda w: ner_inputs.teacher_model(
            RUNS, w.run, w.corpus, rule_outputs()
        ),
        train=rules.build_mixture.output.train,
    output:
        soft_labels="results/soft_label_ner/{corpus}/{run}/local/soft_labels.parquet",
    log:
        "logs/soft_label_ner/{corpus}/{run}.log",
    benchmark:
        "benchmarks/soft_label_ner/{corpus}/{run}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=120,
    shell:
        "synthdeid --log {log:q} soft-label-ner --teacher {input.teacher:q}"
        " --train {input.train:q} --out {output.soft_labels:q} --threads {threads}"
        " --no-progress"


rule train_ner:
    """Fine-tune a token-classification de-identification model on one run's mixture.

    GPU rule: on SLURM it asks for one GPU (resources gpu=1); on a CPU it uses
    the rule's threads. Output: a Hugging Face model directory (weights,
    tokenizer, synthdeid_ner.json with the operating point, training history,
    model card). A run with `distill_from` also learns its teacher's soft labels
    (soft_label_ner; ner.training.distill_alpha / distill_temperature). The training
    state is saved after every epoch in resume/ beside the model: a job stopped midway
    (a signal, the SLURM time limit) goes on from its last finished epoch when it is run
    again on the same inputs, settings and code; the folder goes once the model is saved.
    """
    input:
        unpack(lambda w: ner_inputs.tapt_input(RUNS, w.run, w.corpus, rule_outputs())),
        unpack(
            lambda w: ner_inputs.distill_input(RUNS, w.run, w.corpus, rule_outputs())
        ),
        train=rules.build_mixture.output.train,
        validation=rules.build_mixture.output.validation,
        summary=rules.build_mixture.output.summary,
    output:
        model=directory("results/train_ner/{corpus}/{run}/model"),
    log:
        "logs/train_ner/{corpus}/{run}.log",
    benchmark:
        "benchmarks/train_ner/{corpus}/{run}.tsv"
    conda:
        "../../envs/gpu.yaml"
    threads: 2
    resources:
        gpu=1,
        mem_mb=12000,
        runtime=240,
    params:
        settings=lambda w: as_json(
            ner_inputs.training_settings(RUNS, w.run, w.corpus, rule_outputs())
        ),
        # the teacher run of a distilled run (distill_from): a new teacher reruns it
        distill_from=lambda w: RUNS.distill_teacher(w.run) or "",
        soft_labels=lambda w, input: ner_inputs.distill_arguments(input),
        # weights trained on the mixture, like the model's: kept beside it, never released
        resume_dir=beside_output("model", "resume"),
    shell:
        "synthdeid --log {log:q} train-ner --train {input.train:q}"
        " --validation {input.validation:q} --mixture-summary {input.summary:q}"
        " --settings {params.settings:q} {params.soft_labels} --run {wildcards.run:q}"
        " --out-dir {output.model:q} --resume-dir {params.resume_dir:q} --threads {threads}"


rule ensemble_ner:
    """Combine trained runs into one tagger: the mean of their token probabilities.

    For runs with `members`. The O threshold is chosen again, by the run's
    operating-point rule, on the members' validation notes minus every note
    and patient any member trained on. Output: an ensemble directory
    (synthdeid_ensemble.json with member paths relative to it, model card).
    """
    input:
        unpack(
            lambda w: ner_inputs.ensemble_inputs(RUNS, w.run, w.corpus, rule_outputs())
        ),
    output:
        model=directory("results/ensemble_ner/{corpus}/{run}/model"),
    log:
        "logs/ensemble_ner/{corpus}/{run}.log",
    conda:
        "../../envs/cpu.yaml"
    threads: 2
    params:
        members=lambda w, input: ner_inputs.ensemble_arguments(RUNS, w.run, input),
        settings=operating_point_settings,
    shell:
        "synthdeid --log {log:q} ensemble-ner {params.members}"
        " --settings {params.settings:q} --run {wildcards.run:q} --out-dir {output.model:q}"
        " --device cpu --threads {threads} --no-progress"


rule stack_lexicons:
    """Stack name and place lexicons over a trained run: a calibrated logistic regression per token.

    For runs with `base` and `lexicons`. Fitted on development notes only (the
    base's validation notes and the run's parts of the split, default seed,
    less every note and patient the base trained on; never the holdout), with
    C chosen by grouped cross-validation over patients; its O threshold is
    chosen again on the same notes. Output: a stacked directory
    (synthdeid_stacker.json with the base path relative to it, the lexicons'
    sources and licences, the coefficients; model card).
    """
    input:
        unpack(
            lambda w: ner_inputs.stacked_inputs(RUNS, w.run, w.corpus, rule_outputs())
        ),
        notes=rules.split_notes.output.notes,
    output:
        model=directory("results/stack_lexicons/{corpus}/{run}/model"),
    log:
        "logs/stack_lexicons/{corpus}/{run}.log",
    benchmark:
        "benchmarks/stack_lexicons/{corpus}/{run}.tsv"
    conda:
        "../../envs/cpu.yaml"
    threads: 2
    params:
        lexicons=lambda w: ",".join(NER_RUNS[w.run]["lexicons"]),
        # the split parts whose notes, with the base's validation notes, fit the stacker
        parts=lambda w: NER_RUNS[w.run].get("parts") or ["seed"],
        settings=operating_point_settings,
    shell:
        "synthdeid --log {log:q} stack-lexicons --model {input.model:q} --notes {input.notes:q}"
        " --parts {params.parts:q} --validation {input.validation:q} --train {input.train:q}"
        " --lexicons {params.lexicons:q} --settings {params.settings:q} --run {wildcards.run:q}"
        " --out-dir {output.model:q} --device cpu --threads {threads} --no-progress"


rule predict_ner:
    """De-identify the evaluation notes with one run's model or ensemble (CPU, length-bucketed batches).

    output: predictions.parquet (original text, predicted spans),
            deidentified.parquet (redacted or surrogate text), summary.json (notes/s)
    In surrogate mode the key's fingerprint is a parameter, as for
    replace_surrogates (a new key reruns this step).
    With shards.predict_ner N > 1: one job per row range of the notes, joined
    by gather_predict_ner.
    """
    input:
        model=run_model,
        notes=rules.split_notes.output.notes,
    output:
        predictions=sharded(
            "results/predict_ner/{corpus}/{run}/predictions.parquet",
            SHARDS["predict_ner"],
        ),
        deidentified=sharded(
            "results/predict_ner/{corpus}/{run}/deidentified.parquet",
            SHARDS["predict_ner"],
        ),
        summary=sharded(
            "results/predict_ner/{corpus}/{run}/summary.json", SHARDS["predict_ner"]
        ),
    log:
        sharded("logs/predict_ner/{corpus}/{run}.log", SHARDS["predict_ner"]),
    benchmark:
        sharded("benchmarks/predict_ner/{corpus}/{run}.tsv", SHARDS["predict_ner"])
    conda:
        "../../envs/cpu.yaml"
    threads: 2
    params:
        parts=config["ner"]["deid"]["parts"],
        mode=config["ner"]["deid"]["mode"],
        ages="--safe-harbor-ages" if config["ner"]["deid"]["safe_harbor_ages"] else "",
        precision=config["ner"]["deid"]["precision"],
        batch_size=config["ner"]["deid"]["batch_size"],
        key_file=config["surrogate"]["key_file"] or "",
        key_fingerprint=deid_key_fingerprint,
        shard=shard_flag,
    shell:
        "synthdeid --log {log:q} predict-ner --model {input.model:q} --notes {input.notes:q}"
        " --parts {params.parts:q} --out {output.predictions:q}"
        " --out-deidentified {output.deidentified:q} --summary {output.summary:q}"
        " --mode {params.mode} {params.ages} --precision {params.precision}"
        " --batch-size {params.batch_size}"
        " --key-file={params.key_file:q} --device cpu --threads {threads} {params.shard}"


rule gather_predict_ner:
    """Join the shards of predict_ner (shards.predict_ner > 1) into one run's predictions.

    The same bytes as one predict_ner job; the summary's counts are added up and
    its notes/s is one job's (synthdeid.shards).
    """
    input:
        predictions=shard_inputs(
            "results/predict_ner/{corpus}/{run}/predictions.parquet",
            SHARDS["predict_ner"],
        ),
        deidentified=shard_inputs(
            "results/predict_ner/{corpus}/{run}/deidentified.parquet",
            SHARDS["predict_ner"],
        ),
        summary=shard_inputs(
            "results/predict_ner/{corpus}/{run}/summary.json", SHARDS["predict_ner"]
        ),
    output:
        predictions="results/predict_ner/{corpus}/{run}/predictions.parquet",
        deidentified="results/predict_ner/{corpus}/{run}/deidentified.parquet",
        summary="results/predict_ner/{corpus}/{run}/summary.json",
    log:
        "logs/predict_ner/{corpus}/{run}.gather.log",
    benchmark:
        "benchmarks/predict_ner/{corpus}/{run}.gather.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        shards=SHARDS["predict_ner"],
    shell:
        "synthdeid --log {log:q} gather-shards --count {params.shards} {output.predictions:q}"
        " {output.deidentified:q} {output.summary:q}"


ruleorder: predict_ner > gather_predict_ner


rule score_anchor:
    """An external de-identifier's predictions (evaluation.anchors) as a run's predictions table.

    The anchor file (deid.pl's spans, say) checked line by line against the
    notes, then the ner.deid.parts notes with its spans, in predict_ner's
    schema: evaluate_ner scores it and compare_ner lists it as a run. A NAME
    span (a name of no stated kind) takes the label of the gold DOCTOR or
    PATIENT span it overlaps (docs/stages/ner.md#anchors).
    output: predictions.parquet, summary.json (spans by label, NAME resolved)
    """
    input:
        anchor=lambda w: anchor_path(ANCHORS[w.anchor]),
        notes=rules.split_notes.output.notes,
    output:
        predictions="results/score_anchor/{corpus}/{anchor}/predictions.parquet",
        summary="results/score_anchor/{corpus}/{anchor}/summary.json",
    log:
        "logs/score_anchor/{corpus}/{anchor}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        parts=config["ner"]["deid"]["parts"],
    shell:
        "synthdeid --log {log:q} score-anchor --anchor {input.anchor:q} --notes {input.notes:q}"
        " --parts {params.parts:q} --name {wildcards.anchor:q}"
        " --out {output.predictions:q} --summary {output.summary:q}"


rule evaluate_ner:
    """Score one run's predictions against the gold spans (VetSynth and SHIELD metrics).

    Safety first: document-level leakage and detection recall, then span
    exact / overlap / token P-R-F1, 80%-coverage recall and per-label figures,
    each with a document-level bootstrap 95% CI.
    """
    input:
        gold=rules.split_notes.output.notes,
        # a run's predictions, or an anchor's (score_anchor)
        predictions=lambda w: ner_inputs.predictions_file(
            w.corpus, w.run, rule_outputs(), ANCHORS
        ),
    output:
        metrics="results/evaluate_ner/{corpus}/{run}/metrics.json",
        table="results/evaluate_ner/{corpus}/{run}/metrics.md",
        html=report(
            "results/evaluate_ner/{corpus}/{run}/metrics.html",
            caption="../report/run_metrics.rst",
            category="De-identification",
            subcategory="{run}",
            labels={"result": "metrics table", "run": "{run}"},
        ),
        csv="results/evaluate_ner/{corpus}/{run}/metrics.csv",
        per_document="results/evaluate_ner/{corpus}/{run}/per_document.parquet",
        figure=report(
            "results/evaluate_ner/{corpus}/{run}/per_label_recall.png",
            caption="../report/per_label_recall.rst",
            category="De-identification",
            subcategory="{run}",
            labels={"result": "per-label recall", "run": "{run}"},
        ),
    log:
        "logs/evaluate_ner/{corpus}/{run}.log",
    wildcard_constraints:
        # the runs and the anchors (evaluation.anchors)
        run="|".join(re.escape(name) for name in [*NER_RUNS, *ANCHORS]),
    conda:
        "../../envs/cpu.yaml"
    params:
        parts=config["ner"]["deid"]["parts"],
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
        out_dir=folder_of("metrics"),
    shell:
        "synthdeid --log {log:q} evaluate-ner --gold {input.gold:q}"
        " --predictions {input.predictions:q} --run {wildcards.run:q}"
        " --parts {params.parts:q} --resamples {params.resamples} --seed {params.seed}"
        " --out-dir {params.out_dir:q}"


rule report_errors:
    """Every missed, mislabelled and spurious span of one run on development notes.

    Development notes: the run's validation notes and ner.error_report.parts
    of the split, less every note of its training mixture; never the holdout.
    output: local/errors.parquet (LOCAL ONLY: note text and context, P(O) per
            span), summary.json (counts per kind and label, P(O) quartiles; no text)
    """
    input:
        model=run_model,
        notes=rules.split_notes.output.notes,
        validation=rules.build_mixture.output.validation,
        train=rules.build_mixture.output.train,
    output:
        errors="results/report_errors/{corpus}/{run}/local/errors.parquet",
        summary="results/report_errors/{corpus}/{run}/summary.json",
    log:
        "logs/report_errors/{corpus}/{run}.log",
    conda:
        "../../envs/cpu.yaml"
    threads: 2
    params:
        parts=ERROR_REPORT["parts"],
        ages="--safe-harbor-ages" if config["ner"]["deid"]["safe_harbor_ages"] else "",
    shell:
        "synthdeid --log {log:q} report-errors --model {input.model:q} --notes {input.notes:q}"
        " --parts {params.parts:q} --validation {input.validation:q} --train {input.train:q}"
        " {params.ages} --threads {threads} --out {output.errors:q} --summary {output.summary:q}"


# The same de-identification on each corpus of evaluation.corpora, all of its notes.
use rule predict_ner as predict_ner_cross with:
    input:
        model=run_model,
        notes=rules.ingest_eval_corpus.output.notes,
    output:
        predictions="results/predict_ner_cross/{corpus}/{run}/{target}/predictions.parquet",
        deidentified="results/predict_ner_cross/{corpus}/{run}/{target}/deidentified.parquet",
        summary="results/predict_ner_cross/{corpus}/{run}/{target}/summary.json",
    log:
        "logs/predict_ner_cross/{corpus}/{run}/{target}.log",
    benchmark:
        "benchmarks/predict_ner_cross/{corpus}/{run}/{target}.tsv"
    # the other params are predict_ner's (use rule ... with: replaces only those it names)
    params:
        parts=[UNSPLIT],


# ... and its scores there (SHIELD's cross-dataset evaluation; compare_ner tabulates them).
use rule evaluate_ner as evaluate_ner_cross with:
    input:
        gold=rules.ingest_eval_corpus.output.notes,
        predictions=rules.predict_ner_cross.output.predictions,
    output:
        metrics="results/evaluate_ner_cross/{corpus}/{run}/{target}/metrics.json",
        table="results/evaluate_ner_cross/{corpus}/{run}/{target}/metrics.md",
        html="results/evaluate_ner_cross/{corpus}/{run}/{target}/metrics.html",
        csv="results/evaluate_ner_cross/{corpus}/{run}/{target}/metrics.csv",
        per_document="results/evaluate_ner_cross/{corpus}/{run}/{target}/per_document.parquet",
        figure="results/evaluate_ner_cross/{corpus}/{run}/{target}/per_label_recall.png",
    log:
        "logs/evaluate_ner_cross/{corpus}/{run}/{target}.log",
    # the other params are evaluate_ner's
    params:
        parts=[UNSPLIT],


rule compare_ner:
    """Compare every run with the reference run: leakage and F1 with CIs, paired bootstrap tests.

    Paired tests use the same document resamples for both runs, with a
    Bonferroni correction across labels (SHIELD). Runs of one arm (one
    configuration, several training seeds) are also summarized over their
    seeds, and each arm is tested against the reference arm (arms.csv).
    The anchors of evaluation.anchors are runs here, each an arm of its own.
    cross_corpus.*: every run on its own holdout and on each corpus of
    evaluation.corpora (SHIELD's cross-dataset tables; an anchor on its holdout only).
    """
    input:
        unpack(
            lambda w: ner_inputs.evaluation_outputs(
                distinct_runs(w), w.corpus, rule_outputs(), ANCHORS
            )
        ),
        unpack(
            lambda w: ner_inputs.cross_outputs(
                distinct_runs(w), EVAL_CORPORA, w.corpus, rule_outputs()
            )
        ),
    output:
        runs="results/compare_ner/{corpus}/runs.csv",
        tests="results/compare_ner/{corpus}/paired_tests.csv",
        arms="results/compare_ner/{corpus}/arms.csv",
        comparison="results/compare_ner/{corpus}/comparison.json",
        html=report(
            "results/compare_ner/{corpus}/runs.html",
            caption="../report/runs_table.rst",
            category="De-identification",
            subcategory="comparison",
            labels={"result": "leakage and F1 by run (tables)", "corpus": "{corpus}"},
        ),
        figure=report(
            "results/compare_ner/{corpus}/runs.png",
            caption="../report/runs.rst",
            category="De-identification",
            subcategory="comparison",
            labels={"result": "leakage and F1 by run", "corpus": "{corpus}"},
        ),
        cross_table="results/compare_ner/{corpus}/cross_corpus.csv",
        cross_markdown="results/compare_ner/{corpus}/cross_corpus.md",
        cross_figure=report(
            "results/compare_ner/{corpus}/cross_corpus.png",
            caption="../report/cross_corpus.rst",
            category="De-identification",
            subcategory="comparison",
            labels={"result": "every run on every corpus", "corpus": "{corpus}"},
        ),
    log:
        "logs/compare_ner/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        runs=lambda w, input: ner_inputs.compare_arguments(
            distinct_runs(w), input, ANCHORS
        ),
        cross=lambda w, input: ner_inputs.cross_arguments(
            w.corpus, EVAL_CORPORA, distinct_runs(w), input
        ),
        reference=RUNS.reference_run,
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
        out_dir=folder_of("runs"),
    shell:
        "synthdeid --log {log:q} compare-ner {params.runs} {params.cross}"
        " --reference {params.reference:q}"
        " --resamples {params.resamples} --seed {params.seed}"
        " --out-dir {params.out_dir:q}"


rule archive_run:
    """What the study table needs of a run, small enough to commit (docs/stages/ner.md).

    The run's per-document counts (note ids hashed, keyed by the scored notes'
    texts), its arm, mixture sizes, DP budget and train time, in one folder;
    compare-ner --archive and tabulate-study --archive rebuild the table from
    such folders alone.
    """
    input:
        unpack(
            lambda w: ner_inputs.archive_inputs(RUNS, w.corpus, w.run, rule_outputs())
        ),
        notes=rules.split_notes.output.notes,
    output:
        per_document="results/archive_run/{corpus}/{run}/per_document.parquet",
        record="results/archive_run/{corpus}/{run}/run.json",
    log:
        "logs/archive_run/{corpus}/{run}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        arguments=lambda w, input: ner_inputs.archive_arguments(RUNS, w.run, input),
        out_dir=folder_of("record"),
    shell:
        "synthdeid --log {log:q} archive-run --run {wildcards.run:q} {params.arguments}"
        " --out-dir {params.out_dir:q}"


rule tabulate_study:
    """The study table and forest plot: every arm against the reference arm.

    Per arm: training notes and realized synthetic share (build_mixture),
    epsilon where its data passed through the DP language model, F1 / recall /
    precision / document leakage as mean +- SD over training seeds with the
    document bootstrap interval, and the difference from the reference arm by
    the two-level paired bootstrap.
    Per run (study_runs.csv, study_runs.md): its figures, the epoch kept and the code and
    machine it trained with.
    """
    input:
        unpack(
            lambda w: ner_inputs.study_inputs(
                distinct_runs(w), w.corpus, rule_outputs()
            )
        ),
        comparison=rules.compare_ner.output.comparison,
        plan=rules.plan_runs.output.plan,
    output:
        table="results/tabulate_study/{corpus}/study.csv",
        markdown="results/tabulate_study/{corpus}/study.md",
        runs_table="results/tabulate_study/{corpus}/study_runs.csv",
        runs_markdown="results/tabulate_study/{corpus}/study_runs.md",
        html=report(
            "results/tabulate_study/{corpus}/study.html",
            caption="../report/study_table.rst",
            category="De-identification",
            subcategory="study",
            labels={"result": "arms vs reference (table)", "corpus": "{corpus}"},
        ),
        figure=report(
            "results/tabulate_study/{corpus}/study.png",
            caption="../report/study.rst",
            category="De-identification",
            subcategory="study",
            labels={"result": "arms vs reference", "corpus": "{corpus}"},
        ),
    log:
        "logs/tabulate_study/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        arguments=lambda w, input: ner_inputs.study_arguments(distinct_runs(w), input),
        title=config["ner"]["study_title"],
        out_dir=folder_of("table"),
    shell:
        "synthdeid --log {log:q} tabulate-study --comparison {input.comparison:q}"
        " --plan {input.plan:q} {params.arguments} --title {params.title:q} --out-dir {params.out_dir:q}"


rule compare_ner_archive:
    """compare-ner over the archived runs of ner.study_archive (every run there, its arm)."""
    input:
        archive_files(STUDY_ARCHIVE),
    output:
        comparison="results/compare_ner_archive/{corpus}/comparison.json",
        arms="results/compare_ner_archive/{corpus}/arms.csv",
    log:
        "logs/compare_ner_archive/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        archive=STUDY_ARCHIVE,
        reference=archived_reference(STUDY_ARCHIVE, RUNS),
        resamples=config["ner"]["evaluation"]["resamples"],
        seed=config["ner"]["evaluation"]["seed"],
        out_dir=folder_of("comparison"),
    shell:
        "synthdeid --log {log:q} compare-ner --archive {params.archive:q}"
        " --reference {params.reference:q}"
        " --resamples {params.resamples} --seed {params.seed}"
        " --out-dir {params.out_dir:q}"


rule tabulate_study_archive:
    """tabulate-study over the archived runs of ner.study_archive (sizes, budgets, train
    times and the degenerate arms of its plan.json, all from the archive)."""
    input:
        archive_files(STUDY_ARCHIVE),
        comparison=rules.compare_ner_archive.output.comparison,
    output:
        table="results/tabulate_study_archive/{corpus}/study.csv",
        markdown="results/tabulate_study_archive/{corpus}/study.md",
        runs_table="results/tabulate_study_archive/{corpus}/study_runs.csv",
        runs_markdown="results/tabulate_study_archive/{corpus}/study_runs.md",
        html="results/tabulate_study_archive/{corpus}/study.html",
        figure=report(
            "results/tabulate_study_archive/{corpus}/study.png",
            caption="../report/study.rst",
            category="De-identification",
            subcategory="study",
            labels={
                "result": "arms vs reference (archived runs)",
                "corpus": "{corpus}",
            },
        ),
    log:
        "logs/tabulate_study_archive/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        archive=STUDY_ARCHIVE,
        title=config["ner"]["study_title"],
        out_dir=folder_of("table"),
    shell:
        "synthdeid --log {log:q} tabulate-study --comparison {input.comparison:q}"
        " --archive {params.archive:q} --title {params.title:q} --out-dir {params.out_dir:q}"


rule study:
    """Target: the study table and figure of the configured corpus (snakemake study); from
    the archived runs of ner.study_archive where it is set, else from the runs."""
    input:
        expand(
            "results/{step}/{corpus}/study.{ext}",
            step="tabulate_study_archive" if STUDY_ARCHIVE else "tabulate_study",
            corpus=CORPUS,
            ext=["md", "png"],
        ),


rule archive:
    """Target: every run of the configured corpus archived, degenerate arms' runs aside, and
    the plan that names those arms (snakemake archive; commit plan.json with the runs).
    """
    input:
        lambda w: [
            f"results/archive_run/{CORPUS}/{run}/run.json"
            for run in distinct_runs(CORPUS).runs
        ],
        plan=f"results/plan_runs/{CORPUS}/plan.json",
