"""tritonize: from a Hugging Face transformer to a Triton model repository that serves raw strings."""

__version__ = "0.1.0"
