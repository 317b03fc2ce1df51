"""Token-classification de-identification models: mixtures, training, inference."""
