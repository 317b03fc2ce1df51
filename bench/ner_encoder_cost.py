"""Benchmark the CPU cost of a de-identifier training step: bundled-mpnet against bundled-minilm.

    nice -n 15 python bench/ner_encoder_cost.py --threads 1 --steps 4
    python bench/ner_encoder_cost.py --encoders bundled-minilm --precisions fp32 bf16 --threads 2

Both encoders train on the same text: the synthetic demo corpus
(resources/demo/notes.jsonl) joined into one long note and cut into
``--windows`` windows of ``--max-length`` tokens with the training stride (64),
so every window is full length, like almost all PhysioNet windows. Each
encoder runs in its own process (its peak memory is its own): the model is
loaded as ``train_ner`` loads it (``AutoModelForTokenClassification`` with the
corpus's BIO tags), one untimed step warms up, then ``--steps`` optimizer steps
of ``--batch-size`` windows are timed through the training loop's own pieces
(``collate``, class-weighted cross-entropy, fused AdamW, gradient clipping,
linear schedule), in fp32 or, with ``--precisions``, also in bf16 autocast as
``train_ner`` runs it (``ner.training.precision: bf16``). All see the same
windows in the same order.

Printed per encoder: parameters, seconds per step (median, fastest, slowest),
tokens per second, peak resident memory, the step time over that of the
first encoder in the first precision, measured in the same run (the
baseline), whether this CPU computes bf16 natively, and the extrapolation to one
epoch of the PhysioNet train part (``--epoch-windows`` 1004 windows of 512
tokens at batch 8: 126 steps; the validation pass after each epoch is not
included). Model loading (and the one-time assembly of bundled-mpnet) is
outside the timing.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "bundled-minilm"
ENCODERS = (BASELINE, "bundled-mpnet")
DEMO_NOTES = REPO / "resources" / "demo" / "notes.jsonl"
STRIDE = 64


def demo_text_note() -> object:
    """The demo notes joined into one note (spans shifted), so windows come out full."""
    from synthdeid.ingest import IngestSettings, ingest_corpus
    from synthdeid.labels import LabelMap
    from synthdeid.notes import Note, Span

    notes = ingest_corpus(DEMO_NOTES, IngestSettings("jsonl", LabelMap.identity(), "demo")).notes
    text, spans = "", []
    for note in notes:
        spans += [Span(s.start + len(text), s.end + len(text), s.label) for s in note.spans]
        text += note.text + "\n\n"
    return Note("demo-joined", "demo", text, tuple(spans), "demo")


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One encoder, in this process: seconds per training step."""
    import numpy as np
    import torch
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        get_linear_schedule_with_warmup,
    )

    from synthdeid.encoders import resolve_model_name
    from synthdeid.ner.batching import collate
    from synthdeid.ner.model import DeidTagger, NerSettings
    from synthdeid.ner.tagging import IGNORE_INDEX, make_windows
    from synthdeid.ner.training import autocast_dtype, class_weights, labels_in, optimizer_step
    from synthdeid.runtime import set_seed

    torch.set_num_threads(args.threads)
    set_seed(1)
    note = demo_text_note()
    labels = labels_in([note])
    settings = NerSettings(labels=list(labels), max_length=args.max_length, stride=STRIDE)
    tags = settings.tags
    path = resolve_model_name(args.worker)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForTokenClassification.from_pretrained(
        path,
        num_labels=len(tags),
        id2label=dict(enumerate(tags)),
        label2id={tag: i for i, tag in enumerate(tags)},
    )
    tagger = DeidTagger(model, tokenizer, settings, torch.device("cpu"))
    windows = make_windows(
        tagger.encode([note], with_tags=True),
        max_length=args.max_length,
        stride=STRIDE,
        cls_id=tokenizer.cls_token_id,
        sep_id=tokenizer.sep_token_id,
    )
    n_batches = args.steps + 1
    if len(windows) < args.windows or args.windows < n_batches * args.batch_size:
        raise SystemExit(
            f"{len(windows)} windows of the demo text, {args.windows} asked; "
            f"{n_batches} batches of {args.batch_size} need {n_batches * args.batch_size}"
        )
    windows = windows[: args.windows]
    batches = [
        list(range(b * args.batch_size, (b + 1) * args.batch_size)) for b in range(n_batches)
    ]
    weights = class_weights(windows, len(tags), 0.5)
    loss_fn = torch.nn.CrossEntropyLoss(
        weight=torch.tensor(weights, dtype=torch.float32), ignore_index=IGNORE_INDEX
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, n_batches)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    amp_dtype = autocast_dtype(args.precision, torch.device("cpu"))
    model.train()
    seconds = []
    tokens = 0
    for k, batch in enumerate(batches):
        started = time.perf_counter()
        inputs = collate(windows, batch, tokenizer.pad_token_id)
        target = inputs.pop("labels")
        with torch.autocast(
            "cpu", dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None
        ):
            logits = model(**inputs).logits
        loss = loss_fn(logits.float().view(-1, len(tags)), target.view(-1))
        optimizer_step(loss, model, optimizer, scaler, scheduler, 1.0)
        if k > 0:  # the first step warms up
            seconds.append(time.perf_counter() - started)
            tokens += int(inputs["attention_mask"].sum())
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "window_tokens": int(np.mean([w.input_ids.shape[0] for w in windows])),
        "seconds_per_step": statistics.median(seconds),
        "fastest": min(seconds),
        "slowest": max(seconds),
        "tokens_per_second": tokens / sum(seconds),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--steps", type=int, default=4, help="timed steps (after one warm-up)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--windows", type=int, default=40, help="windows cut from the demo text")
    parser.add_argument(
        "--epoch-windows", type=int, default=1004, help="windows in one epoch to extrapolate to"
    )
    parser.add_argument(
        "--encoders", nargs="+", choices=ENCODERS, default=list(ENCODERS), help="in this order"
    )
    parser.add_argument(
        "--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32"], help="in this order"
    )
    parser.add_argument("--worker", choices=ENCODERS, help=argparse.SUPPRESS)
    parser.add_argument("--precision", choices=("fp32", "bf16"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args)))
        return 0

    results = {}
    for name in args.encoders:
        for precision in args.precisions:
            command = [sys.executable, __file__, "--worker", name, "--precision", precision]
            for flag in ("threads", "steps", "batch_size", "max_length", "windows"):
                command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return done.returncode
            results[name, precision] = json.loads(done.stdout.strip().splitlines()[-1])
    from synthdeid.runtime import native_cpu_bf16

    epoch_steps = math.ceil(args.epoch_windows / args.batch_size)
    print(
        f"{args.steps} timed steps of {args.batch_size} windows of {args.max_length} tokens "
        f"({args.windows} windows of the demo text), {args.threads} torch thread(s); "
        f"one epoch = {args.epoch_windows} windows = {epoch_steps} steps; "
        f"native bf16 on this CPU: {'yes' if native_cpu_bf16() else 'no'}"
    )
    print(
        f"{'encoder':<16} {'prec':>5} {'params':>8} {'s/step':>7} {'[fast, slow]':>14} "
        f"{'tok/s':>7} {'peak MB':>8} {'x base':>7} {'epoch':>9}"
    )
    base = next(iter(results.values()))["seconds_per_step"]
    for (name, precision), r in results.items():
        epoch_minutes = epoch_steps * r["seconds_per_step"] / 60
        print(
            f"{name:<16} {precision:>5} {r['parameters'] / 1e6:>7.1f}M {r['seconds_per_step']:>7.2f} "
            f"[{r['fastest']:>5.2f}, {r['slowest']:>5.2f}] {r['tokens_per_second']:>7.0f} "
            f"{r['peak_rss_mb']:>8.0f} {r['seconds_per_step'] / base:>7.2f} "
            f"{epoch_minutes:>6.1f} min"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
