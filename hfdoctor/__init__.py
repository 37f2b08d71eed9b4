"""hfdoctor: lint and repair Hugging Face model repositories."""

__version__ = "0.1.0"
