"""The user's browser in the OAuth tests (BROWSER="python oauth_browser.py %s"):
it records the authorization URL in $OAUTH_TEST_BROWSER_LOG and follows the
redirects, the last of them to foliko's loopback listener."""

from __future__ import annotations

import os
import sys
import urllib.request

url = sys.argv[1]
with open(os.environ["OAUTH_TEST_BROWSER_LOG"], "a", encoding="utf-8") as log:
    log.write(url + "\n")
with urllib.request.urlopen(url, timeout=30) as page:
    page.read()
