"""Opaque page tokens over the stage-1 ranking.

A page is a window of ``shortlist`` consecutive stage-1 candidates; stage 2 reranks the window and
the answer holds its best ``top_k``. The token of the next page records where the next window starts
and a digest of everything that shaped the ranking (query text and image, filter, mode, shortlist,
top_k and the index), so a token is refused (422) with any other request or after an index swap,
rather than silently paging through a different ranking. Tokens are not secrets: forging one only
moves the window, which any client may do by asking for more pages.
"""

from __future__ import annotations

import base64
import hashlib
import json

MAX_OFFSET = 10_000  # stage-1 ranks a client may page to


class InvalidPageToken(ValueError):
    """A page token that is malformed, or belongs to another query or index (HTTP 422)."""


def ranking_digest(**parts) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_page_token(offset: int, digest: str) -> str:
    raw = json.dumps({"o": int(offset), "d": digest}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_token(token: str, digest: str) -> int:
    """The stage-1 offset a token starts its page at."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        offset, token_digest = data["o"], data["d"]
    except (ValueError, TypeError, KeyError):
        raise InvalidPageToken("not a page token this server issued") from None
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= MAX_OFFSET:
        raise InvalidPageToken("not a page token this server issued")
    if token_digest != digest:
        raise InvalidPageToken(
            "the token belongs to another query, filter or index; send the same request as the page it came from"
        )
    return offset
