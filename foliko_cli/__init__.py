"""foliko: language-model conversations in named, persistent sessions."""

__version__ = "0.1.0"
