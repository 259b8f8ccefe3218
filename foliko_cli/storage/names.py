"""Safe file names for session ids: readable when they can be, never a path.

``a``-``z``, ``0``-``9``, ``_`` and ``-`` are kept; an upper-case letter becomes
``^`` and the letter in lower case; every other character becomes ``%XX`` per
UTF-8 byte. Names never contain a separator, never start with a dot and never
differ only in case; Windows device names get their first letter escaped; a
name longer than MAX_STEM characters is cut and given ``~`` and 32 hex digits
of the id's SHA-256. The JSON backend names its files so, and every backend's
lock files too.
"""

from __future__ import annotations

MAX_STEM = 120
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_DEVICE_NAMES = frozenset(
    {"con", "prn", "aux", "nul"} | {f"{kind}{n}" for kind in ("com", "lpt") for n in range(10)}
)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def file_stem(session_id: str) -> str:
    """The file name (without ``.json``) of ``session_id``; see the module docstring."""
    if _PLAIN.issuperset(session_id) and len(session_id) <= MAX_STEM:
        return _undeviced(session_id)
    tokens = []
    for char in session_id:
        if char in _PLAIN:
            tokens.append(char)
        elif "A" <= char <= "Z":
            tokens.append("^" + char.lower())
        else:
            tokens.append("".join(f"%{byte:02X}" for byte in _utf8(char)))
    stem = "".join(tokens)
    if len(stem) <= MAX_STEM:
        return _undeviced(stem)
    import hashlib

    digest = hashlib.sha256(_utf8(session_id)).hexdigest()[:32]
    kept, room = [], MAX_STEM - len(digest) - 1
    for token in tokens:
        room -= len(token)
        if room < 0:
            break
        kept.append(token)
    return "".join(kept) + "~" + digest


def _undeviced(stem: str) -> str:
    return f"%{ord(stem[0]):02X}{stem[1:]}" if stem in _DEVICE_NAMES else stem


def session_id_from_stem(stem: str) -> str | None:
    """The id whose file stem is ``stem``, or None (a hashed or foreign name)."""
    if _PLAIN.issuperset(stem):  # the id itself, if it is not named otherwise
        return stem if stem and file_stem(stem) == stem else None
    out = bytearray()
    i = 0
    try:
        while i < len(stem):
            char = stem[i]
            if char == "%":
                out.append(int(stem[i + 1 : i + 3], 16))
                i += 3
            elif char == "^":
                out += stem[i + 1].upper().encode()
                i += 2
            else:
                out += char.encode()
                i += 1
        session_id = out.decode("utf-8", "surrogatepass")
    except (ValueError, IndexError):
        return None
    return session_id if session_id and file_stem(session_id) == stem else None
