"""Credentials out of what sepo writes or prints: an endpoint URL may carry them
(`http://user:pw@host/v1`, `?api_key=...`); every name, record, cache line, error and progress
line that shows a URL shows it through `redact_secrets`."""
from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")
_SECRET_QUERY = re.compile(
    r"(?i)(?P<name>[?&](?:api[_-]?key|key|token|access[_-]?token|secret|password|passwd|pwd|"
    r"sig|signature|auth|credentials?)=)[^&#\s\"']+"
)


def redact_secrets(text: str) -> str:
    """`text` with the credentials of any URL in it replaced by `***`: the user-info part
    (`http://user:pw@host` -> `http://***@host`) and secret-looking query values (`?api_key=***`)."""
    text = _USERINFO.sub(lambda m: m.group("scheme") + "***@", text)
    return _SECRET_QUERY.sub(lambda m: m.group("name") + "***", text)
