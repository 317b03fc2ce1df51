"""Teacher labelling (SHIELD's distillation path): silver spans for unlabelled notes.

A teacher (an LLM answering an extraction prompt, a trained de-identification
model, regex and dictionary detectors, or an ensemble of those) labels notes
as if they had no gold; the silver notes then form a training pool for a
student model, and the comparison stage measures how far the student is from
its teacher and, where gold exists, how noisy the silver labels were.
"""
