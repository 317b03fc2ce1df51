"""Many de-identifier training runs at once on one machine: the levers of the recipe, over seeds.

    python bench/ner_levers.py run --plan bench/levers/physionet.json --data DIR --out OUT \\
        --work WORK [--workers 8] [--deadline 540]

``run`` trains every run of a plan (a JSON file, below) in ``--workers``
processes (one GPU is shared by all), each run with the project's own
``synthdeid.ner.training.train``, and predicts the run's parts at every
``O`` threshold of the plan's grid with the trained tagger. A run with
``teachers`` waits for them, then trains on their soft labels (the mean of
the teachers' token probabilities on its training notes:
``synthdeid.ner.distillation``). Runs with ``save: true`` keep their model
directory in ``--work`` (teachers must). Results are written after every run
into ``--out`` as tar files of at most 15 MB (``levers-00.tar``, ...): per run a
gzipped JSON file with the config,
the training history, timing, and the predicted spans (character offsets and
labels only, no text) per part and threshold. At ``--deadline`` seconds no
run is started; at ``--deadline`` plus ``--grace`` the driver writes what is
done and stops, so a lent machine's time limit never loses finished runs.

Where the data lives (``--data``): ``notes.parquet`` (the split notes: the
seed and holdout parts are read from it), ``mixtures/<name>/train.parquet``,
``validation.parquet`` and ``summary.json`` (build-mixture's outputs) and the
encoders under ``models/``. The plan::

    {"grid": [0.5, ...],
     "mixtures": {"real_only": {"parts": ["validation", "seed", "holdout"]}, ...},
     "models": {"minilm": "models/minilm"},
     "runs": [{"name": "dep4-s1", "mixture": "deploy", "training": {...}, "save": true,
               "teachers": []}, ...]}

``training`` is a ``ner.training`` mapping whose ``model`` may name a key of
``models``. The scores, operating points and tables are made from the bundle
afterwards, on any machine, by ``bench/ner_levers_score.py`` (``python
bench/ner_levers.py results --bundle OUT --into DIR`` unpacks the runs first).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import gzip
import io
import json
import logging
import multiprocessing
import os
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("ner_levers")

PARTS_FROM_NOTES = ("seed", "train", "holdout")


@dataclass(frozen=True)
class RunSpec:
    name: str
    mixture: str
    training: dict[str, Any]
    teachers: tuple[str, ...] = ()
    save: bool = False


@dataclass(frozen=True)
class Plan:
    grid: tuple[float, ...]
    parts: dict[str, tuple[str, ...]]  # mixture -> parts to predict
    models: dict[str, str]
    runs: tuple[RunSpec, ...]
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Plan:
        data = json.loads(path.read_text())
        runs = tuple(
            RunSpec(
                name=str(r["name"]),
                mixture=str(r["mixture"]),
                training=dict(r.get("training", {})),
                teachers=tuple(r.get("teachers", ())),
                save=bool(r.get("save", False)),
            )
            for r in data["runs"]
        )
        plan = cls(
            grid=tuple(float(t) for t in data["grid"]),
            parts={name: tuple(m["parts"]) for name, m in data["mixtures"].items()},
            models=dict(data.get("models", {})),
            runs=runs,
            raw=data,
        )
        plan.check(path)
        return plan

    def check(self, path: Path) -> None:
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names):
            raise SystemExit(f"{path}: run names repeat")
        order = {name: i for i, name in enumerate(names)}
        for run in self.runs:
            if run.mixture not in self.parts:
                raise SystemExit(f"{path}: run {run.name}: unknown mixture {run.mixture!r}")
            for teacher in run.teachers:
                if teacher not in order or order[teacher] >= order[run.name]:
                    raise SystemExit(
                        f"{path}: run {run.name}: teacher {teacher!r} must be an earlier run"
                    )
                if not next(r for r in self.runs if r.name == teacher).save:
                    raise SystemExit(f"{path}: teacher {teacher!r} needs save: true")


def _notes_of_part(data: Path, mixture: str, part: str) -> list[Any]:
    from synthdeid.notes import read_notes

    if part == "validation":
        return read_notes(data / "mixtures" / mixture / "validation.parquet")
    if part not in PARTS_FROM_NOTES:
        raise ValueError(f"unknown part {part!r}")
    return [note for note in read_notes(data / "notes.parquet") if note.split == part]


def execute(
    spec: RunSpec, plan_raw: dict[str, Any], data: Path, work: Path, device: str
) -> dict[str, Any]:
    """Train one run, predict its parts at every threshold; the result as a JSON object."""
    import torch

    from synthdeid.ner.distillation import teacher_soft_labels
    from synthdeid.ner.ensemble import EnsembleTagger, ensemble_settings
    from synthdeid.ner.mixtures import read_mixture, read_mixture_summary
    from synthdeid.ner.model import DeidTagger
    from synthdeid.ner.model_card import save_model_directory
    from synthdeid.ner.training import TrainingConfig, train
    from synthdeid.notes import read_notes

    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    plan = Plan(
        grid=tuple(plan_raw["grid"]),
        parts={k: tuple(v["parts"]) for k, v in plan_raw["mixtures"].items()},
        models=dict(plan_raw.get("models", {})),
        runs=(),
    )
    training = dict(spec.training)
    model = training.get("model")
    if model in plan.models:
        training["model"] = str(data / plan.models[model])
    training.setdefault("device", device)
    config = TrainingConfig.from_mapping(training)
    mixture_dir = data / "mixtures" / spec.mixture
    mixture = read_mixture(mixture_dir / "train.parquet")
    validation = read_notes(mixture_dir / "validation.parquet")
    soft = None
    teacher_seconds = 0.0
    if spec.teachers:
        teacher_started = time.perf_counter()
        members = [
            (name, DeidTagger.load(work / "models" / name, device=device)) for name in spec.teachers
        ]
        teacher: Any
        if len(members) == 1:
            teacher = members[0][1]
        else:
            teacher = EnsembleTagger(members, ensemble_settings(members))
        distinct = list({m.note.note_id: m.note for m in mixture}.values())
        labels = teacher_soft_labels(teacher, distinct, batch_size=32)
        soft = (teacher.settings.tags, {item.note_id: item for item in labels})
        del teacher, members
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        teacher_seconds = time.perf_counter() - teacher_started
    result = train(
        [m.note for m in mixture],
        validation,
        config,
        copies=[m.copies for m in mixture],
        soft_labels=soft,
        progress=False,
    )
    if spec.save:
        save_model_directory(
            result,
            config,
            work / "models" / spec.name,
            mixture=read_mixture_summary(mixture_dir / "summary.json"),
            run=spec.name,
        )
    tagger = result.tagger
    spans: dict[str, dict[str, dict[str, list[list[Any]]]]] = {}
    predict_started = time.perf_counter()
    for part in plan.parts[spec.mixture]:
        notes = _notes_of_part(data, spec.mixture, part)
        encoded = tagger.encode(notes)
        probabilities = tagger.token_probabilities(encoded, batch_size=config.eval_batch_size)
        spans[part] = {}
        for threshold in plan.grid:
            spans[part][repr(threshold)] = {
                note.note_id: [
                    [s.start, s.end, s.label]
                    for s in tagger.decode(probs, enc, note.text, o_threshold=threshold)
                ]
                for note, enc, probs in zip(notes, encoded, probabilities, strict=True)
            }
    return {
        "name": spec.name,
        "mixture": spec.mixture,
        "teachers": list(spec.teachers),
        "config": config.to_json() | {"model": spec.training.get("model")},
        "history": result.history,
        "best_epoch": result.best_epoch,
        "operating_point": tagger.settings.operating_point,
        "validation_sweep": result.sweep,
        "timing": {
            **result.timing,
            "teacher_seconds": round(teacher_seconds, 2),
            "predict_seconds": round(time.perf_counter() - predict_started, 2),
            "total_seconds": round(time.perf_counter() - started, 2),
        },
        "soft_label_notes": 0 if soft is None else len(soft[1]),
        "device": str(tagger.device),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "grid": list(plan.grid),
        "spans": spans,
    }


def write_bundle(work: Path, out: Path, status: dict[str, Any], part_mb: float = 15.0) -> None:
    """Every finished run's gzipped JSON and the driver's status, as tar files of at most
    ``part_mb`` MB each (``levers-00.tar``, ...: a lent machine returns files of a bounded size).
    The parts are replaced atomically; each run is compressed once, when it finishes."""
    out.mkdir(parents=True, exist_ok=True)
    members = sorted((work / "runs").glob("*.json.gz"))
    parts: list[list[Path]] = [[]]
    size = 0
    for path in members:
        n = path.stat().st_size
        if parts[-1] and size + n > part_mb * 1e6:
            parts.append([])
            size = 0
        parts[-1].append(path)
        size += n
    body = json.dumps(status, indent=1).encode()
    names = []
    for index, paths in enumerate(parts):
        name = f"levers-{index:02d}.tar"
        temporary = out / f".{name}.tmp"
        with tarfile.open(temporary, "w") as tar:
            for path in paths:
                tar.add(path, arcname=f"runs/{path.name}")
            if index == 0:
                info = tarfile.TarInfo("status.json")
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
        os.replace(temporary, out / name)
        names.append(name)
    for stale in out.glob("levers-*.tar"):
        if stale.name not in names:
            stale.unlink()


def read_bundle(folder: Path, into: Path) -> list[Path]:
    """Unpack every ``levers-NN.tar`` of ``folder`` into ``into``; the runs' JSON files."""
    for path in sorted(folder.glob("levers-*.tar")):
        with tarfile.open(path) as tar:
            tar.extractall(into, filter="data")
    runs = []
    for packed in sorted((into / "runs").glob("*.json.gz")):
        target = packed.with_suffix("")
        target.write_bytes(gzip.decompress(packed.read_bytes()))
        runs.append(target)
    return runs


def drive(args: argparse.Namespace) -> int:
    plan = Plan.read(args.plan)
    work: Path = args.work
    (work / "runs").mkdir(parents=True, exist_ok=True)
    (work / "models").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    status: dict[str, Any] = {"plan": plan.raw, "runs": {}, "workers": args.workers}

    def elapsed() -> float:
        return time.monotonic() - started

    def note(name: str, state: str, **extra: Any) -> None:
        status["runs"][name] = {"state": state, "at_seconds": round(elapsed(), 1), **extra}
        print(f"[levers {elapsed():7.1f}s] {name}: {state} {extra or ''}", flush=True)

    pending = list(plan.runs)
    done: set[str] = set()
    failed: set[str] = set()
    running: dict[futures.Future[dict[str, Any]], RunSpec] = {}
    context = multiprocessing.get_context("spawn")
    pool = futures.ProcessPoolExecutor(max_workers=args.workers, mp_context=context)
    stopped = False
    try:
        while pending or running:
            for spec in list(pending):
                if any(t in failed for t in spec.teachers):
                    pending.remove(spec)
                    failed.add(spec.name)
                    note(spec.name, "skipped", why="a teacher failed or did not run")
                    continue
                if elapsed() >= args.deadline:
                    pending.remove(spec)
                    failed.add(spec.name)
                    note(spec.name, "not started", why="deadline")
                    continue
                if len(running) < args.workers and all(t in done for t in spec.teachers):
                    pending.remove(spec)
                    future = pool.submit(execute, spec, plan.raw, args.data, work, args.device)
                    running[future] = spec
                    note(spec.name, "started")
            if not running:
                continue
            finished, _ = futures.wait(
                list(running), timeout=5, return_when=futures.FIRST_COMPLETED
            )
            for future in finished:
                spec = running.pop(future)
                try:
                    result = future.result()
                except Exception:  # a run's failure is recorded; the others go on
                    failed.add(spec.name)
                    note(spec.name, "failed", error=traceback.format_exc()[-2000:])
                else:
                    path = work / "runs" / f"{spec.name}.json.gz"
                    path.write_bytes(gzip.compress(json.dumps(result).encode(), 6))
                    done.add(spec.name)
                    note(
                        spec.name,
                        "done",
                        seconds=result["timing"]["total_seconds"],
                        best_epoch=result["best_epoch"],
                        epochs=result["timing"]["epochs"],
                    )
                write_bundle(work, args.out, status)
            if elapsed() >= args.deadline + args.grace:
                for spec in running.values():
                    note(spec.name, "stopped", why="deadline + grace")
                break
    finally:
        status["seconds"] = round(elapsed(), 1)
        write_bundle(work, args.out, status)
        stopped = bool(running)
        if stopped:  # at the deadline: the workers are killed, not waited for
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
        pool.shutdown(wait=not stopped, cancel_futures=True)
    print(f"[levers] {len(done)} done, {len(failed)} not, {elapsed():.0f} s", flush=True)
    if stopped:  # the pool's manager thread would wait for the killed workers at exit
        os._exit(0)
    return 0


def pack(args: argparse.Namespace) -> int:
    """A model folder made small enough to travel: fp16, or int8 rows with fp16 scales.

    Every floating tensor of two or more dimensions is stored as int8 with one
    absmax scale per row (``--int8``) or as fp16; the rest as fp16. The
    tensors go into shards of at most ``--shard-mb`` MB; the other files of
    the folder are copied; ``unpack`` widens everything back to fp32.
    """
    import torch
    from safetensors.torch import load_file, save_file

    source: Path = args.model
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(source / "model.safetensors"))
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    limit = int(args.shard_mb * 1e6)
    for name, tensor in tensors.items():
        packed: dict[str, torch.Tensor] = {}
        if tensor.is_floating_point() and tensor.dim() >= 2 and args.int8:
            rows = tensor.float().reshape(tensor.shape[0], -1)
            scale = rows.abs().amax(dim=1).clamp_min(1e-12) / 127.0
            packed[f"{name}::int8"] = torch.round(rows / scale[:, None]).to(torch.int8)
            packed[f"{name}::scale"] = scale.to(torch.float32)
            packed[f"{name}::shape"] = torch.tensor(list(tensor.shape), dtype=torch.int64)
        elif tensor.is_floating_point():
            packed[f"{name}::fp16"] = tensor.to(torch.float16)
        else:
            packed[f"{name}::raw"] = tensor
        nbytes = sum(t.numel() * t.element_size() for t in packed.values())
        if size + nbytes > limit and shards[-1]:
            shards.append({})
            size = 0
        shards[-1].update(packed)
        size += nbytes
    for i, shard in enumerate(shards):
        save_file(
            {k: v.contiguous() for k, v in shard.items()}, str(out / f"packed-{i}.safetensors")
        )
    for path in source.iterdir():
        if path.is_file() and path.name != "model.safetensors" and path.stat().st_size < 2e6:
            (out / path.name).write_bytes(path.read_bytes())
    print(f"packed {source} into {len(shards)} shard(s) in {out}")
    return 0


def unpack(args: argparse.Namespace) -> int:
    """The packed shards (from one or more folders) back into one fp32 model folder."""
    import torch
    from safetensors.torch import load_file, save_file

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    packed: dict[str, torch.Tensor] = {}
    for folder in args.packed:
        for path in sorted(folder.glob("packed-*.safetensors")):
            packed.update(load_file(str(path)))
        for path in folder.iterdir():
            if path.is_file() and not path.name.startswith("packed-"):
                (out / path.name).write_bytes(path.read_bytes())
    tensors: dict[str, torch.Tensor] = {}
    for key, value in packed.items():
        name, kind = key.rsplit("::", 1)
        if kind == "int8":
            shape = tuple(int(d) for d in packed[f"{name}::shape"].tolist())
            scale = packed[f"{name}::scale"]
            tensors[name] = (value.float() * scale[:, None]).reshape(shape)
        elif kind == "fp16":
            tensors[name] = value.float()
        elif kind == "raw":
            tensors[name] = value
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    print(f"unpacked {len(tensors)} tensors into {out}")
    return 0


def unpack_results(args: argparse.Namespace) -> int:
    runs = read_bundle(args.bundle, args.into)
    print(f"{len(runs)} runs in {args.into / 'runs'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train and predict every run of a plan")
    run.add_argument("--plan", type=Path, required=True)
    run.add_argument("--data", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--work", type=Path, required=True)
    run.add_argument("--workers", type=int, default=8)
    run.add_argument("--device", default="auto")
    run.add_argument("--deadline", type=float, default=540.0, help="no run starts after (s)")
    run.add_argument("--grace", type=float, default=30.0, help="then stop after this (s)")
    packer = sub.add_parser("pack", help="a model folder in fp16 or int8 shards, to travel")
    packer.add_argument("--model", type=Path, required=True)
    packer.add_argument("--out", type=Path, required=True)
    packer.add_argument("--int8", action="store_true")
    packer.add_argument("--shard-mb", type=float, default=50.0)
    unpacker = sub.add_parser("unpack", help="packed shards back into an fp32 model folder")
    unpacker.add_argument("--packed", type=Path, nargs="+", required=True)
    unpacker.add_argument("--out", type=Path, required=True)
    results = sub.add_parser("results", help="unpack a sweep's tar parts into runs/*.json")
    results.add_argument("--bundle", type=Path, required=True)
    results.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    commands = {"run": drive, "pack": pack, "unpack": unpack, "results": unpack_results}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
