"""The primitives put into other libraries' models: ``hf`` (Hugging Face: ``optimize_model`` and
one adapter per replaced piece)."""
