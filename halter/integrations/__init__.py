"""Adapters that let other inference stacks use halter grammars (``transformers`` so far)."""
