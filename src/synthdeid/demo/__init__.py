"""The synthetic demo corpus: its generator and the phrase tables it draws from."""
