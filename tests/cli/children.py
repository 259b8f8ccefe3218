"""Child processes that take Ctrl-C even when the test run ignores SIGINT.

Under ``nohup`` or as a shell background job, SIGINT is ignored, and an
ignored signal stays ignored across exec: a child would never see the
SIGINT a test sends it. ``preexec_fn=default_sigint`` restores it.
"""

from __future__ import annotations

import signal


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
