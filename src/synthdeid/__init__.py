"""synthdeid: privacy-preserving synthetic clinical text and de-identification."""

__version__ = "0.1.0"
