"""``foliko serve``: sessions over HTTP (OpenAI-compatible), for many users."""
