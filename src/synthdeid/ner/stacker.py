"""Lexicon evidence as a calibrated stacker over a de-identifier's token probabilities.

The base tagger (a trained model or an ensemble) gives every token a
probability of ``O``. A logistic regression per token re-estimates
P(PHI) = 1 - P(O) from that probability and from evidence the encoder
lacks, then the stacked P(O) replaces the model's:

features of a token (:func:`feature_names`)
    ``p_o_logit`` and ``label_logit``: the log-odds of the model's P(O) and
    of its largest B-/I- probability (log-odds, so a linear model can
    sharpen or soften the model's confidence); ``title`` and ``upper``: the
    casing of the token's word (:func:`synthdeid.ner.casing.word_case`);
    ``in:<lexicon>``: the word is part of a match of that lexicon
    (:mod:`synthdeid.ner.lexicons`); ``in:<lexicon>&cased``: the same, and
    the word is Title or UPPER case ("Will" is evidence, "will" is not).
    A token's word is the ``\\w+`` run it lies in (joined across inner
    apostrophes, :func:`synthdeid.ner.lexicons.text_words`); punctuation has
    none, and its word features are 0.
fit (:func:`fit_stacker`)
    on development notes' tokens (never the holdout; see
    :mod:`synthdeid.ner.lexicon_stacking`), target "the token overlaps a gold
    span", features standardized, L2 penalty, balanced class weights
    (PHI tokens are a few percent). ``C`` is chosen on a grid by grouped
    cross-validation (folds never split a patient's notes), by the log loss
    of the held-out tokens. Class weights shift a logistic model's intercept
    by log(n_O / n_PHI); that shift is taken back (the prior correction for
    weighted logistic regression), so the stacked P(O) is calibrated to the
    development notes' base rate and the operating-point grid means what it
    means for a model. The saved coefficients are on the raw features.
use
    the stacked P(O) replaces the model's; the non-O probabilities are
    rescaled to the new non-O mass, so the label a span gets is still the
    model's choice. The ``O`` threshold is chosen again, on the same
    development notes, by :mod:`synthdeid.ner.operating_point`, from the
    *out-of-fold* stacked probabilities (each patient's tokens scored by the
    fit that left that patient out), so the threshold is not set on tokens
    the stacker was fitted on.

A stacked directory holds ``synthdeid_stacker.json`` (the base directory as a
path relative to it, the lexicons with their sources, licences and digests,
the coefficients, the decoding settings; no pickles) and a model card;
:func:`synthdeid.ner.loading.load_tagger` opens it like any other tagger.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from synthdeid.artifacts import reading_record
from synthdeid.errors import ConfigError, InputError
from synthdeid.ner.casing import TITLE, UPPER, word_case
from synthdeid.ner.lexicons import LEXICONS, check_names, text_words, token_words
from synthdeid.ner.model import NerSettings, SpanTagger
from synthdeid.ner.tagging import spans_to_tags
from synthdeid.notes import Note, Span

log = logging.getLogger(__name__)

STACKER_FILE = "synthdeid_stacker.json"
MODEL_FEATURES: tuple[str, ...] = ("p_o_logit", "label_logit")
CASE_FEATURES: tuple[str, ...] = ("title", "upper")
# probabilities are clipped to [EPSILON, 1 - EPSILON] before their log-odds
EPSILON = 1e-6
DEFAULT_C_GRID: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0, 100.0)
MAX_FOLDS = 5


def feature_names(lexicons: Sequence[str]) -> list[str]:
    """The stacker's features, in column order (see the module docstring)."""
    return [
        *MODEL_FEATURES,
        *CASE_FEATURES,
        *(f"in:{name}" for name in lexicons),
        *(f"in:{name}&cased" for name in lexicons),
    ]


def lexical_features(text: str, offsets: np.ndarray, lexicons: Sequence[str]) -> np.ndarray:
    """Per token (rows of ``offsets``), the casing and lexicon columns of :func:`feature_names`.

    float32, (n_tokens, 2 + 2 * len(lexicons)); 0 for tokens outside any word.
    """
    words = text_words(text, lexicons)
    cases = np.array([word_case(text[a:b]) for a, b in words.bounds.tolist()], dtype=np.int64)
    title = cases == TITLE
    upper = cases == UPPER
    cased = (title | upper)[:, None]
    per_word = np.column_stack([title, upper, words.members, words.members & cased]).astype(
        np.float32
    )
    out = np.zeros((len(offsets), len(CASE_FEATURES) + 2 * len(lexicons)), dtype=np.float32)
    index = token_words(words.bounds, offsets)
    inside = index >= 0
    out[inside] = per_word[index[inside]]
    return out


def logit(p: np.ndarray) -> np.ndarray:
    """Log-odds of probabilities clipped to [EPSILON, 1 - EPSILON] (float64)."""
    q = np.clip(np.asarray(p, dtype=np.float64), EPSILON, 1.0 - EPSILON)
    return np.log(q) - np.log1p(-q)


def model_features(probs: np.ndarray) -> np.ndarray:
    """Per token, the log-odds of P(O) and of the largest B-/I- probability (float64)."""
    return np.column_stack([logit(probs[:, 0]), logit(probs[:, 1:].max(axis=1))])


def replace_o(probs: np.ndarray, p_phi: np.ndarray) -> np.ndarray:
    """``probs`` with P(O) = 1 - ``p_phi``; the non-O columns keep their proportions.

    Where the model gave the non-O tags no mass at all, the new mass is shared
    equally among them.
    """
    non_o = probs[:, 1:].astype(np.float64)
    mass = non_o.sum(axis=1, keepdims=True)
    share = np.divide(non_o, mass, out=np.full_like(non_o, 1.0 / non_o.shape[1]), where=mass > 0)
    out = np.empty(probs.shape, dtype=np.float32)
    out[:, 0] = 1.0 - p_phi
    out[:, 1:] = share * np.asarray(p_phi, dtype=np.float64)[:, None]
    return out


def gold_phi(offsets: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """Per token, whether it overlaps a gold span (a B- or I- tag of any label)."""
    labels = {span.label for span in spans}
    tag_index = {f"{prefix}-{label}": 1 for label in labels for prefix in ("B", "I")}
    return spans_to_tags(offsets, spans, tag_index) > 0


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, 1.0 / (1.0 + np.exp(-np.clip(z, -500.0, 500.0))))


@dataclass(frozen=True)
class LexiconStacker:
    """A fitted stacker: weights on the raw features of :func:`feature_names`."""

    lexicons: tuple[str, ...]
    weights: np.ndarray  # float64, (n_features,)
    intercept: float

    def __post_init__(self) -> None:
        check_names(self.lexicons)
        if self.weights.shape != (len(self.feature_names),):
            raise ConfigError(
                f"stacker: {self.weights.shape[0]} weights for {len(self.feature_names)} features"
            )

    @property
    def feature_names(self) -> list[str]:
        return feature_names(self.lexicons)

    def phi_probability(self, features: np.ndarray) -> np.ndarray:
        """P(PHI) per row of a feature matrix."""
        return _sigmoid(np.asarray(features, dtype=np.float64) @ self.weights + self.intercept)

    def restack(self, probs: np.ndarray, lexical: np.ndarray) -> np.ndarray:
        """One note's tag probabilities with the stacked P(O) (see :func:`replace_o`)."""
        features = np.column_stack([model_features(probs), lexical])
        return replace_o(probs, self.phi_probability(features))

    def coefficients(self) -> dict[str, float]:
        return dict(zip(self.feature_names, self.weights.tolist(), strict=True))


@dataclass(frozen=True)
class StackerFitSettings:
    """How ``C`` is chosen: the grid and the most folds of the grouped cross-validation."""

    c_grid: tuple[float, ...] = DEFAULT_C_GRID
    max_folds: int = MAX_FOLDS

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StackerFitSettings:
        settings = cls(
            c_grid=tuple(float(c) for c in data.get("c_grid", DEFAULT_C_GRID)),
            max_folds=int(data.get("max_folds", MAX_FOLDS)),
        )
        if not settings.c_grid or any(not c > 0 for c in settings.c_grid):
            raise ConfigError(f"stacker c_grid: values must be positive, got {settings.c_grid}")
        if settings.max_folds < 2:
            raise ConfigError(f"stacker max_folds: at least 2, got {settings.max_folds}")
        return settings


@dataclass(frozen=True)
class StackerFit:
    """The stacker fitted on every development token, and how it was chosen."""

    stacker: LexiconStacker
    out_of_fold: np.ndarray  # P(PHI) of each token from the fold that held its patient out
    record: dict[str, Any] = field(default_factory=dict)


def _fit_weights(x: np.ndarray, y: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    """Raw-feature weights and the prior-corrected intercept of one weighted L2 fit."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=c, class_weight="balanced", max_iter=2000)
    model.fit(scaler.transform(x), y)
    beta = model.coef_[0] / scaler.scale_
    intercept = float(model.intercept_[0] - np.sum(beta * scaler.mean_))
    n_phi = int(y.sum())
    # balanced weights multiply the odds of PHI by n_O / n_PHI: take that back
    intercept -= math.log((len(y) - n_phi) / n_phi)
    return beta.astype(np.float64), intercept


def _log_loss(y: np.ndarray, p_phi: np.ndarray) -> float:
    from sklearn.metrics import log_loss

    return float(log_loss(y, np.clip(p_phi, EPSILON, 1.0 - EPSILON), labels=[False, True]))


def fit_stacker(
    features: np.ndarray,
    phi: np.ndarray,
    groups: Sequence[str] | np.ndarray,
    lexicons: Sequence[str],
    settings: StackerFitSettings | None = None,
) -> StackerFit:
    """Choose ``C`` by grouped cross-validation, then fit on every token.

    ``features`` (n_tokens, n_features) follow :func:`feature_names`; ``phi``
    is the gold (token overlaps a span); ``groups`` the patient of each token.
    """
    from sklearn.model_selection import GroupKFold

    settings = settings or StackerFitSettings()
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(phi, dtype=bool)
    group_array = np.asarray(groups)
    if x.shape != (len(y), len(feature_names(lexicons))) or len(group_array) != len(y):
        raise ConfigError(
            f"stacker: features {x.shape}, gold {len(y)} and groups {len(group_array)} "
            f"disagree ({len(feature_names(lexicons))} features expected)"
        )
    n_groups = len(set(group_array.tolist()))
    phi_groups = len(set(group_array[y].tolist()))
    if phi_groups < 2 or y.all():
        raise ConfigError(
            f"stacker: the development notes need PHI tokens of at least two patients and "
            f"some non-PHI tokens (got PHI in {phi_groups} of {n_groups} patients, "
            f"{int(y.sum())} of {len(y)} tokens): add development notes"
        )
    folds = list(GroupKFold(n_splits=min(settings.max_folds, n_groups)).split(x, y, group_array))
    cv: list[dict[str, float]] = []
    best: tuple[float, float, np.ndarray] | None = None
    for c in sorted(set(settings.c_grid)):
        out_of_fold = np.empty(len(y), dtype=np.float64)
        for train, test in folds:
            if y[train].all() or not y[train].any():
                raise ConfigError(
                    "stacker: a cross-validation fold has training tokens of one class only; "
                    "add development notes with PHI from more patients"
                )
            weights, intercept = _fit_weights(x[train], y[train], c)
            out_of_fold[test] = _sigmoid(x[test] @ weights + intercept)
        loss = _log_loss(y, out_of_fold)
        cv.append({"C": c, "log_loss": loss})
        if best is None or loss < best[1]:
            best = (c, loss, out_of_fold)
    assert best is not None
    chosen_c, chosen_loss, out_of_fold = best
    weights, intercept = _fit_weights(x, y, chosen_c)
    stacker = LexiconStacker(tuple(lexicons), weights, intercept)
    base_p_phi = 1.0 - _sigmoid(x[:, 0])  # p_o_logit is the first feature
    record = {
        "C": chosen_c,
        "cv_log_loss": chosen_loss,
        "base_log_loss": _log_loss(y, base_p_phi),
        "cv": cv,
        "folds": len(folds),
        "class_weight": "balanced, intercept corrected by -log(n_O / n_PHI)",
        "penalty": "l2",
        "tokens": len(y),
        "phi_tokens": int(y.sum()),
        "patients": n_groups,
    }
    log.info(
        "stacker: C %g (grouped %d-fold log loss %.4f; the model's own P(O): %.4f) on %d tokens",
        chosen_c,
        len(folds),
        chosen_loss,
        record["base_log_loss"],
        len(y),
    )
    return StackerFit(stacker, out_of_fold, record)


@dataclass(frozen=True)
class StackedEncoding:
    """One note as the base tagger encodes it, with its tokens' lexical features."""

    base: Any
    lexical: np.ndarray  # float32, (n_tokens, n lexical features)

    @property
    def note_id(self) -> str:
        return str(self.base.note_id)

    @property
    def offsets(self) -> np.ndarray:
        return np.asarray(self.base.offsets)

    @property
    def n_tokens(self) -> int:
        return int(self.base.n_tokens)


class StackedTagger(SpanTagger):
    """A base tagger (model or ensemble) whose P(O) a :class:`LexiconStacker` replaces."""

    def __init__(self, base: SpanTagger, stacker: LexiconStacker, settings: NerSettings) -> None:
        if list(settings.labels) != list(base.settings.labels):
            raise ConfigError(
                f"stacked tagger: labels {settings.labels} differ from the base tagger's "
                f"{base.settings.labels}; refit the stacker on the base it wraps"
            )
        self.base = base
        self.stacker = stacker
        self.settings = settings

    def encode(self, notes: Sequence[Note]) -> list[StackedEncoding]:
        encoded = self.base.encode(notes)
        return [
            StackedEncoding(e, lexical_features(note.text, e.offsets, self.stacker.lexicons))
            for note, e in zip(notes, encoded, strict=True)
        ]

    def token_probabilities(
        self,
        encoded: Sequence[Any],
        *,
        batch_size: int = 32,
        progress: bool = False,
        length_sorted: bool = True,
    ) -> list[np.ndarray]:
        """The base's probabilities per note, with the stacked P(O)."""
        probabilities = self.base.token_probabilities(
            [e.base for e in encoded],
            batch_size=batch_size,
            progress=progress,
            length_sorted=length_sorted,
        )
        return [
            self.stacker.restack(p, e.lexical) for p, e in zip(probabilities, encoded, strict=True)
        ]

    @classmethod
    def load(cls, directory: str | Path, load_base: Callable[[Path], SpanTagger]) -> StackedTagger:
        """A stacked directory; ``load_base`` opens its base, a model directory of any kind
        (:func:`synthdeid.ner.loading.load_tagger` passes itself, with the device and
        precision asked for)."""
        directory = Path(directory)
        path = directory / STACKER_FILE
        with reading_record(path, "stacker file"):
            data = json.loads(path.read_text())
            base_dir = stacked_base(directory, data)
            lexicons = tuple(str(r["name"]) for r in data["lexicons"])
            stacker = LexiconStacker(
                lexicons,
                np.asarray(data["coefficients"], dtype=np.float64),
                float(data["intercept"]),
            )
            settings = NerSettings(**data["settings"])
            features = list(data["features"])
        if features != stacker.feature_names:
            raise InputError(
                path, None, f"features {features} are not this version's {stacker.feature_names}"
            )
        check_lexicons(path, data["lexicons"])
        return cls(load_base(base_dir), stacker, settings)

    def save(
        self,
        directory: Path,
        base_dir: Path,
        *,
        target: Path,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Write ``synthdeid_stacker.json`` into ``directory``; the base path is relative
        to ``target``, the directory's final place when ``directory`` is a staging one."""
        data = {
            "base": {"path": relative_base(base_dir, target)},
            "lexicons": [LEXICONS[name].record() for name in self.stacker.lexicons],
            "features": self.stacker.feature_names,
            "coefficients": self.stacker.weights.tolist(),
            "intercept": self.stacker.intercept,
            "settings": asdict(self.settings),
            **(extra or {}),
        }
        (Path(directory) / STACKER_FILE).write_text(json.dumps(data, indent=2) + "\n")


def check_lexicons(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Each lexicon a stacker was fitted with must load with the same entries today."""
    from synthdeid.ner.lexicons import lexicon, lexicon_digest

    for record in records:
        name = str(record["name"])
        check_names([name])
        digest = lexicon_digest(name)
        if digest != record.get("digest"):
            raise ConfigError(
                f"{path}: lexicon {name!r} now has {len(lexicon(name))} entries (digest "
                f"{digest}) but the stacker was fitted with {record.get('entries')} (digest "
                f"{record.get('digest')}): install the pinned packages "
                f"{record.get('packages')} or refit with synthdeid stack-lexicons"
            )


def relative_base(base_dir: Path, target: Path) -> str:
    """The base directory as a path relative to the stacked directory ``target``."""
    return os.path.relpath(Path(base_dir).resolve(), Path(target).resolve())


def stacked_base(directory: Path, data: Mapping[str, Any]) -> Path:
    """The base model directory a stacker file (``data``, read in ``directory``) names."""
    return directory / str(data["base"]["path"])


def is_stacked_directory(directory: str | Path) -> bool:
    return (Path(directory) / STACKER_FILE).is_file()
