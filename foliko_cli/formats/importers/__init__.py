"""Sessions from other tools' histories: one module per format, each following
the small contract of base.py; reading.py reads a file, a directory or stdin.

Importing this package is cheap (the CLI names the formats at start-up).
"""

FORMATS = ("foliko", "chatgpt", "claude", "claude-code", "codex", "llm", "openwebui", "librechat")
