rule ingest_corpus:
    """Read the configured corpus into the canonical notes table.

    input:  the corpus files (PhysioNet deid, BRAT, JSONL or i2b2 XML)
    output: notes.parquet (canonical schema), summary.json (counts, provenance)
    """
    input:
        lambda w: reader_files(config["corpus"]),
    output:
        notes="results/ingest_corpus/{corpus}/notes.parquet",
        summary="results/ingest_corpus/{corpus}/summary.json",
    log:
        "logs/ingest_corpus/{corpus}.log",
    benchmark:
        "benchmarks/ingest_corpus/{corpus}.tsv"
    conda:
        "../../envs/cpu.yaml"
    params:
        corpus=str(corpus_path(config["corpus"])),
        format=config["corpus"]["format"],
        source=config["corpus"]["source"],
        encoding=config["corpus"]["encoding"],
        patient_id_regex=config["corpus"]["patient_id_regex"] or "",
        overlaps=config["corpus"]["overlaps"],
        label_map=LABEL_MAP,
        coarse_view=COARSE_VIEW,
    shell:
        "synthdeid --log {log:q} ingest-corpus"
        " --corpus {params.corpus:q} --format {params.format:q}"
        " --source {params.source:q} --encoding {params.encoding:q}"
        " --patient-id-regex={params.patient_id_regex:q} --overlaps {params.overlaps:q}"
        " --label-map {params.label_map:q} --coarse-view {params.coarse_view:q}"
        " --out {output.notes:q} --summary {output.summary:q}"


# A further labelled corpus of evaluation.corpora (never split, never trained on): every
# run's model de-identifies it whole (predict_ner_cross) and is scored on it.
# (params it does not name, coarse_view, are ingest_corpus's)
use rule ingest_corpus as ingest_eval_corpus with:
    input:
        lambda w: evaluation_reader_files(eval_corpus(w), config["corpus"]),
    output:
        notes="results/ingest_eval_corpus/{target}/notes.parquet",
        summary="results/ingest_eval_corpus/{target}/summary.json",
    log:
        "logs/ingest_eval_corpus/{target}.log",
    benchmark:
        "benchmarks/ingest_eval_corpus/{target}.tsv"
    params:
        corpus=lambda w: str(corpus_path(eval_corpus(w))),
        format=lambda w: eval_corpus(w)["format"],
        source=lambda w: eval_corpus(w).get("source", w.target),
        encoding=lambda w: eval_corpus(w).get("encoding", "utf-8"),
        patient_id_regex=lambda w: eval_corpus(w).get("patient_id_regex") or "",
        overlaps=lambda w: eval_corpus(w).get("overlaps", "error"),
        label_map=lambda w: label_map_json(
            eval_corpus(w).get("labels", {}).get("mapping")
        ),


rule split_notes:
    """Assign every note to seed / train / holdout, patient by patient.

    input:  notes.parquet from ingest_corpus
    output: notes.parquet with the split column set, summary.json
    """
    input:
        notes=rules.ingest_corpus.output.notes,
    output:
        notes="results/split_notes/{corpus}/notes.parquet",
        summary="results/split_notes/{corpus}/summary.json",
    log:
        "logs/split_notes/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        seed=config["split"]["seed"],
        seed_fraction=config["split"]["fractions"]["seed"],
        train_fraction=config["split"]["fractions"]["train"],
        holdout_fraction=config["split"]["fractions"]["holdout"],
    shell:
        "synthdeid --log {log:q} split-notes --notes {input.notes:q} --seed {params.seed}"
        " --seed-fraction {params.seed_fraction} --train-fraction {params.train_fraction}"
        " --holdout-fraction {params.holdout_fraction}"
        " --out {output.notes:q} --summary {output.summary:q}"


rule plot_corpus_overview:
    """Figure and table of the split corpus: notes (with / without PHI) and spans per label, per part.

    input:  split notes.parquet
    output: overview.png (in the report), overview.tsv
    """
    input:
        notes=rules.split_notes.output.notes,
    output:
        figure=report(
            "results/plot_corpus_overview/{corpus}/overview.png",
            caption="../report/corpus_overview.rst",
            category="Corpus",
            labels={"result": "corpus overview", "corpus": "{corpus}"},
        ),
        table="results/plot_corpus_overview/{corpus}/overview.tsv",
    log:
        "logs/plot_corpus_overview/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        title=lambda w: f"Corpus {w.corpus}: patient-level split",
    shell:
        "synthdeid --log {log:q} plot-corpus-overview --notes {input.notes:q}"
        " --title {params.title:q} --figure {output.figure:q} --table {output.table:q}"
