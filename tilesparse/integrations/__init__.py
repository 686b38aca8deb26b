"""Integrations with other libraries, each behind its own optional extra (``transformers``)."""
