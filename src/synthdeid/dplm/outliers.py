"""Clinically plausible outlier notes planted in the training set (Zecevic et al., sec. 4.6).

Zecevic et al. plant *outliers* in the training set of their language model:
reports of typical length whose findings are a rare combination, distinctive
enough that a sample reproducing one could re-identify a patient, and check
that no sample regenerates them. Canaries (:mod:`synthdeid.dplm.canaries`)
test extraction with nonsense no real note would contain; outliers test it
with text a clinical model is *meant* to learn to write, where a regenerated
combination is exactly the memorization that matters.

Outliers (:func:`make_outliers`): ``k`` ICU-nursing-note-like texts of 60 to
120 words (the canaries' length band, by the same note builder,
:func:`synthdeid.dplm.canaries.build_note`), each built from ICU filler
sentences written for this module (no corpus text) around one sentence that
carries the *distinctive combination* (the outlier's ``phrase``)::

    <support> for <rare diagnosis> after <its trigger>, started on <therapy>
    for concurrent <rare complication>

e.g. "on VA-ECMO for fulminant myocarditis after influenza B, started on
plasmapheresis for concurrent thrombotic thrombocytopenic purpura". Every
slot comes from the word lists of this module: a rare diagnosis with the
triggers and the organ support or therapy that are realistic for it
(:data:`PRESENTATIONS`), and a rare complication with its real treatment
(:data:`COMPLICATIONS`). Each element is real; their concurrence is what makes
a note an outlier. The lists use no eponyms, person names, places, digits or
placeholders, so the identifier scanner has nothing to flag.

Distinct within a draw: no two outliers of a draw share their diagnosis or
their complication, so any two combinations share at most
:data:`MAX_SHARED_SHARE` of either's tokens in order (LCS; the lists' worst
pair is about 0.71, checked over every possible pair by the tests and asserted
for every draw), below the share
(:data:`synthdeid.dplm.canaries.PHRASE_MIN_SHARE`) at which a sample counts
as regenerating one: a sample that regenerates one outlier does not thereby
regenerate another. Hence at most :data:`MAX_OUTLIERS` outliers per draw. The
generator is ``random.Random(seed)`` drawing outlier after outlier, each from
the diagnoses and complications not drawn yet, so a seed gives the same
outliers, and the first ``k`` outliers of a larger ``k``.

Scoring is the canary test's (:func:`synthdeid.dplm.canaries.canary_report`
on the outliers): each outlier's best (maximum) ROUGE-L against all samples,
and whether a sample regenerates its combination.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from synthdeid.dplm.canaries import OUTLIER, Canary, build_note
from synthdeid.dplm.rouge import lcs_length, tokenize
from synthdeid.errors import ConfigError

# outliers of one draw share at most this share of either phrase's tokens in order
MAX_SHARED_SHARE = 0.75


@dataclass(frozen=True)
class Presentation:
    """A rare diagnosis, the triggers and the supports that are realistic for it.

    A support reads after "remains" and before "for <diagnosis>" ("on VA-ECMO",
    "intubated"); a trigger reads after "after" ("influenza B").
    """

    diagnosis: str
    triggers: tuple[str, ...]
    supports: tuple[str, ...]


PRESENTATIONS = (
    Presentation(
        "fulminant myocarditis",
        ("influenza B", "an immune checkpoint inhibitor", "a coxsackievirus infection"),
        (
            "on VA-ECMO",
            "on a percutaneous ventricular assist device",
            "on an intra-aortic balloon pump",
        ),
    ),
    Presentation(
        "acute inflammatory demyelinating polyneuropathy",
        ("Campylobacter enteritis", "a Zika virus infection", "a cytomegalovirus infection"),
        ("intubated", "ventilated via tracheostomy"),
    ),
    Presentation(
        "anti-NMDA receptor encephalitis",
        ("an ovarian teratoma", "herpes simplex encephalitis"),
        ("intubated", "on a continuous midazolam infusion"),
    ),
    Presentation(
        "necrotizing soft tissue infection of the perineum",
        ("a perianal abscess", "a hemorrhoid banding procedure"),
        ("intubated", "on norepinephrine and vasopressin"),
    ),
    Presentation(
        "thyroid storm",
        ("iodinated contrast", "abruptly stopping methimazole"),
        ("on VA-ECMO", "on an esmolol infusion"),
    ),
    Presentation(
        "septic thrombophlebitis of the internal jugular vein",
        ("streptococcal pharyngitis", "a peritonsillar abscess"),
        ("intubated", "on norepinephrine"),
    ),
    Presentation(
        "diffuse alveolar hemorrhage",
        ("cocaine inhalation", "a vasculitis flare"),
        ("on VV-ECMO", "on high-frequency oscillatory ventilation"),
    ),
    Presentation(
        "amniotic fluid embolism",
        ("an emergency cesarean delivery", "induction of labor"),
        ("on VA-ECMO", "on inhaled nitric oxide"),
    ),
    Presentation(
        "peripartum cardiomyopathy",
        ("a twin pregnancy", "severe preeclampsia"),
        ("on a percutaneous ventricular assist device", "on a milrinone infusion"),
    ),
    Presentation(
        "leptospirosis with pulmonary hemorrhage",
        ("freshwater rafting", "flood cleanup work"),
        ("on VV-ECMO", "intubated"),
    ),
    Presentation(
        "botulism",
        ("eating home-canned vegetables", "injecting black tar heroin"),
        ("intubated", "ventilated via tracheostomy"),
    ),
    Presentation(
        "generalized tetanus",
        ("a garden puncture wound", "a neglected foot ulcer"),
        ("intubated", "on a magnesium infusion"),
    ),
    Presentation(
        "severe falciparum malaria",
        ("travel without chemoprophylaxis", "a blood transfusion abroad"),
        ("on CRRT", "intubated"),
    ),
    Presentation(
        "Legionella pneumonia",
        ("a hot tub exposure", "a contaminated cooling tower"),
        ("on VV-ECMO", "proned on the ventilator"),
    ),
    Presentation(
        "necrotizing pancreatitis",
        ("valproate therapy", "severe hypertriglyceridemia"),
        ("on CRRT", "on norepinephrine"),
    ),
    Presentation(
        "massive pulmonary embolism",
        ("a long-haul flight", "testosterone injections"),
        ("on VA-ECMO", "on inhaled nitric oxide"),
    ),
    Presentation(
        "refractory status epilepticus",
        ("cefepime neurotoxicity", "abrupt benzodiazepine withdrawal"),
        ("on a ketamine infusion", "in a pentobarbital coma"),
    ),
    Presentation(
        "toxic epidermal necrolysis",
        ("starting lamotrigine", "starting allopurinol"),
        ("intubated", "on large-volume fluid resuscitation"),
    ),
    Presentation(
        "neuroleptic malignant syndrome",
        ("haloperidol for delirium", "abrupt levodopa withdrawal"),
        ("intubated", "on active cooling"),
    ),
    Presentation(
        "methanol poisoning",
        ("drinking homemade spirits", "drinking windshield washer fluid"),
        ("on hemodialysis", "intubated"),
    ),
    Presentation(
        "spontaneous coronary artery dissection",
        ("a recent childbirth", "intense weightlifting"),
        ("on an intra-aortic balloon pump", "on VA-ECMO"),
    ),
    Presentation(
        "purpura fulminans",
        ("meningococcal sepsis", "pneumococcal sepsis after splenectomy"),
        ("on norepinephrine and vasopressin", "on VA-ECMO"),
    ),
    Presentation(
        "rhino-orbital mucormycosis",
        ("diabetic ketoacidosis", "high-dose steroids"),
        ("intubated", "on liposomal amphotericin"),
    ),
    Presentation(
        "dengue shock syndrome",
        ("a secondary dengue infection", "travel during the rainy season"),
        ("on norepinephrine", "intubated"),
    ),
    Presentation(
        "spontaneous esophageal rupture",
        ("forceful vomiting", "a binge drinking episode"),
        ("intubated", "on norepinephrine"),
    ),
    Presentation(
        "acute liver failure",
        ("a wild mushroom ingestion", "an acetaminophen overdose"),
        ("on CRRT", "intubated"),
    ),
    Presentation(
        "descending necrotizing mediastinitis",
        ("a dental abscess", "a retropharyngeal abscess"),
        ("intubated", "on norepinephrine"),
    ),
    Presentation(
        "cerebral arterial gas embolism",
        ("central line removal while sitting upright", "a rapid scuba diving ascent"),
        ("intubated", "on high-flow oxygen"),
    ),
    Presentation(
        "severe accidental hypothermia",
        ("a night outdoors in the snow", "cold water immersion"),
        ("on VA-ECMO", "on an intravascular warming catheter"),
    ),
    Presentation(
        "snakebite envenomation with coagulopathy",
        ("a rattlesnake bite", "handling a pet viper"),
        ("intubated", "on an antivenom infusion"),
    ),
    Presentation(
        "acute necrotizing encephalopathy",
        ("influenza A", "a parainfluenza infection"),
        ("intubated", "on intracranial pressure monitoring"),
    ),
    Presentation(
        "uremic pericarditis with tamponade",
        ("missed dialysis sessions", "a failed kidney transplant"),
        ("on norepinephrine", "on hemodialysis"),
    ),
    Presentation(
        "thyrotoxic periodic paralysis",
        ("a high-carbohydrate meal", "strenuous exercise"),
        ("intubated", "on a potassium infusion"),
    ),
    Presentation(
        "hereditary angioedema attack",
        ("a dental extraction", "starting lisinopril"),
        ("intubated", "ventilated via tracheostomy"),
    ),
    Presentation(
        "emphysematous pyelonephritis",
        ("uncontrolled diabetes", "an obstructing kidney stone"),
        ("on norepinephrine", "on CRRT"),
    ),
    Presentation(
        "spontaneous gas gangrene",
        ("an occult colon cancer", "neutropenic enterocolitis"),
        ("on norepinephrine and vasopressin", "intubated"),
    ),
    Presentation(
        "osmotic demyelination syndrome",
        ("rapid correction of hyponatremia", "a liver transplant"),
        ("intubated", "ventilated via tracheostomy"),
    ),
    Presentation(
        "acute fatty liver of pregnancy",
        ("a first pregnancy", "a twin pregnancy"),
        ("on CRRT", "intubated"),
    ),
)

# (rare complication, its real treatment), read "started on <therapy> for concurrent <complication>"
COMPLICATIONS = (
    ("thrombotic thrombocytopenic purpura", "plasmapheresis"),
    ("heparin-induced thrombocytopenia", "argatroban"),
    ("methemoglobinemia", "methylene blue"),
    ("hemophagocytic lymphohistiocytosis", "etoposide and dexamethasone"),
    ("atypical hemolytic uremic syndrome", "eculizumab"),
    ("catastrophic antiphospholipid syndrome", "heparin, steroids and plasma exchange"),
    ("pheochromocytoma crisis", "phentolamine"),
    ("adrenal crisis", "stress-dose hydrocortisone"),
    ("calciphylaxis", "sodium thiosulfate"),
    ("thiamine deficiency encephalopathy", "high-dose intravenous thiamine"),
    ("refeeding syndrome", "phosphate replacement"),
    ("serotonin syndrome", "cyproheptadine"),
    ("pneumocystis pneumonia", "high-dose trimethoprim sulfamethoxazole"),
    ("invasive aspergillosis", "voriconazole"),
    ("cytomegalovirus colitis", "ganciclovir"),
    ("tumor lysis syndrome", "rasburicase"),
    ("valproate-induced hyperammonemia", "levocarnitine"),
    ("disseminated strongyloidiasis", "ivermectin"),
    ("acute intermittent porphyria", "hemin"),
    ("cyanide toxicity from nitroprusside", "hydroxocobalamin"),
    ("digoxin toxicity", "digoxin immune fab"),
    ("myxedema coma", "intravenous levothyroxine"),
    ("hypercalcemic crisis", "calcitonin and zoledronic acid"),
    ("lithium toxicity", "urgent hemodialysis"),
    ("ethylene glycol poisoning", "fomepizole"),
    ("cryptococcal meningitis", "amphotericin and flucytosine"),
    ("warm autoimmune hemolytic anemia", "pulse methylprednisolone"),
    ("immune checkpoint inhibitor colitis", "infliximab"),
    ("cytokine release syndrome", "tocilizumab"),
    ("scurvy", "ascorbic acid"),
    ("salicylate toxicity", "a sodium bicarbonate infusion"),
    ("carbon monoxide poisoning", "hyperbaric oxygen"),
    ("acute chest syndrome", "exchange transfusion"),
    ("malignant hyperthermia", "dantrolene"),
    ("dabigatran-associated bleeding", "idarucizumab"),
    ("rivaroxaban-associated intracranial hemorrhage", "andexanet alfa"),
)

# the sentence carrying the combination; {phrase} starts with the support
LEAD_INS = (
    "Patient remains {phrase}.",
    "Overnight the patient remained {phrase}.",
    "At handover the patient was {phrase}.",
    "Per the intensivist the patient is now {phrase}.",
)

FILLER_SENTENCES = (
    "Sedated and resting, opens eyes to voice and settles with reassurance.",
    "Ventilator settings unchanged overnight, breath sounds coarse at the bases.",
    "Arterial line waveform crisp and cuff pressures correlate well.",
    "Oral care and suctioning done, secretions thin and white.",
    "Central line dressing clean, dry and intact, all lumens flush easily.",
    "Urine output adequate via the indwelling catheter, clear and yellow.",
    "Tube feeds running at goal through the feeding tube, residuals low.",
    "Turned side to side with pressure points checked and pillows placed.",
    "Pupils equal and reactive, moves all extremities on request.",
    "Mild redness over the sacrum, barrier cream applied and heels offloaded.",
    "Sinus rhythm on the monitor without ectopy this shift.",
    "Family updated at the bedside and questions answered.",
    "Blood glucose checks continued and insulin adjusted per protocol.",
    "Electrolytes replaced per protocol and repeat labs sent.",
    "Head of bed kept raised and mouth care given per the ventilator bundle.",
    "Sequential compression devices on both legs.",
    "Afebrile overnight, blood cultures still pending.",
    "Pain assessed with the behavioral scale and treated with fentanyl boluses.",
    "Bowels not open, laxatives given as charted.",
    "Calm and cooperative, no restraints required.",
    "Chest physiotherapy done with the respiratory therapist.",
    "Plan discussed on rounds with the intensivist and the pharmacist.",
    "Hand hygiene and contact precautions maintained.",
    "Spontaneous breathing trial deferred per the team.",
    "Lines and tubes secured, alarms set and audible.",
    "Fluid balance slightly positive, weight unchanged.",
    "Skin warm and peripheral pulses palpable in all four limbs.",
    "Eyes lubricated and kept closed while sedated.",
    "Chlorhexidine bath given and linen changed.",
    "Continue to monitor closely and escalate concerns to the covering team.",
)


def compose(support: str, diagnosis: str, trigger: str, therapy: str, complication: str) -> str:
    """The distinctive combination of an outlier, from its five slots."""
    return (
        f"{support} for {diagnosis} after {trigger}, "
        f"started on {therapy} for concurrent {complication}"
    )


MAX_OUTLIERS = min(len(PRESENTATIONS), len(COMPLICATIONS))


def _shared_share(a: list[str], b: list[str]) -> float:
    """Largest share of either token list that the other covers in order (LCS)."""
    return lcs_length(a, b) / min(len(a), len(b))


def make_outliers(k: int, seed: int) -> list[Canary]:
    """``k`` outlier notes with distinct combinations (see the module docstring)."""
    if k < 0:
        raise ConfigError(f"the number of outliers must be >= 0, got {k}")
    if k > MAX_OUTLIERS:
        raise ConfigError(f"at most {MAX_OUTLIERS} outliers can be made, asked for {k}")
    rng = random.Random(seed)
    presentations, complications = list(PRESENTATIONS), list(COMPLICATIONS)
    outliers: list[Canary] = []
    for i in range(k):
        # each diagnosis and each complication once per draw, so the first k of a
        # larger k are the same and every draw of k <= MAX_OUTLIERS succeeds
        presentation = presentations.pop(rng.randrange(len(presentations)))
        complication, therapy = complications.pop(rng.randrange(len(complications)))
        phrase = compose(
            rng.choice(presentation.supports),
            presentation.diagnosis,
            rng.choice(presentation.triggers),
            therapy,
            complication,
        )
        carrier = rng.choice(LEAD_INS).format(phrase=phrase)
        text = build_note(rng, carrier, FILLER_SENTENCES)
        outliers.append(Canary(f"outlier_{i + 1:03d}", text, phrase, OUTLIER))
    tokens = [tokenize(o.phrase) for o in outliers]
    for a, b in itertools.combinations(tokens, 2):
        assert _shared_share(a, b) <= MAX_SHARED_SHARE, "outlier combinations must be distinct"
    return outliers
