"""Test helpers for the NER tests: a tiny BERT built from a config, notes built from pieces."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, BertConfig, BertModel

from synthdeid.encoders import default_model_path
from synthdeid.notes import UNSPLIT, Note, Span


def tiny_encoder_dir(directory: Path, *, layers: int = 2, hidden: int = 32) -> Path:
    """An untrained 2-layer BERT encoder with the bundled MiniLM tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def note_from_pieces(
    note_id: str, patient_id: str, pieces: list[str | tuple[str, str]], split: str = UNSPLIT
) -> Note:
    """A made-up note from text pieces; ``(text, label)`` pieces become gold spans."""
    text = ""
    spans = []
    for piece in pieces:
        if isinstance(piece, tuple):
            surface, label = piece
            spans.append(Span(len(text), len(text) + len(surface), label))
            text += surface
        else:
            text += piece
    return Note(note_id, patient_id, text, tuple(spans), "made-up", split)


def tiny_tagger(directory: Path) -> Path:
    """A 2-layer tagger trained for one epoch on made-up notes (seconds on a CPU): something
    predict-ner and deid load. Its one label is DOCTOR."""
    import torch

    from synthdeid.ner.model_card import save_model_directory
    from synthdeid.ner.training import TrainingConfig, train

    torch.manual_seed(0)
    notes = [
        note_from_pieces(f"n{i}", f"p{i % 4}", ["Seen by Dr. ", ("Okafor", "DOCTOR"), " today."])
        for i in range(8)
    ]
    config = TrainingConfig.from_mapping(
        {
            "model": str(tiny_encoder_dir(directory / "encoder")),
            "max_length": 32,
            "stride": 8,
            "epochs": 1,
            "batch_size": 4,
            "learning_rate": 1e-3,
        }
    )
    result = train(notes[:6], notes[6:], config, progress=False)
    mixture = {"regime": "augmentation", "n_train_total": 6}
    return save_model_directory(result, config, directory / "model", mixture=mixture, run="tiny")


# made-up clinical-sounding sentences for MLM pretraining tests
SUBJECTS = ("The patient", "She", "He", "The resident", "The nurse")
EVENTS = (
    "was seen in the clinic this morning for a routine follow up visit",
    "reports mild pain in the lower back that improves with rest",
    "denies fever, chills, cough or shortness of breath since the last visit",
    "tolerated the new medication well and has no new complaints today",
    "will return in two weeks to review the laboratory results with the team",
    "walked the hallway twice with assistance and slept well overnight",
    "had stable vital signs and a normal examination of the chest",
    "was advised to drink more fluids and to keep a daily symptom diary",
)


def made_up_sentences(n: int, step: int = 3) -> list[str]:
    """``n`` sentences: a subject and an event, cycling through both lists."""
    return [f"{SUBJECTS[i % len(SUBJECTS)]} {EVENTS[(step * i) % len(EVENTS)]}." for i in range(n)]


# a few steps of TAPT on a tiny encoder (the model is added by each test)
TAPT_RUN_CONFIG: dict[str, object] = {
    "max_steps": 8,
    "batch_size": 4,
    "max_length": 32,
    "warmup_steps": 2,
    "seed": 3,
    "heldout_fraction": 0.1,
    "log_every": 1,
}
