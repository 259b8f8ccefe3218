"""What reads and writes other tools' files: imports, exports, transcripts, templates."""
