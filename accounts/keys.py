"""API key format: `sk-sluice-<public id>-<secret>`.

The public id (12 hex characters) names the key in logs, the audit trail and the console;
the secret is 32 random bytes. Only the SHA-256 of the whole key is stored. Management
tokens (the /api/v1/ API) use the same scheme under their own prefix, `sk-sluice-admin-`,
so neither kind of key is ever mistaken for the other.
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KEY_PREFIX = "sk-sluice-"
MANAGEMENT_TOKEN_PREFIX = "sk-sluice-admin-"
_PUBLIC_ID_CHARS = 12


@dataclass(frozen=True)
class NewKey:
    prefix: str  # public, stored: "sk-sluice-<public id>"
    secret_hash: str  # stored
    plaintext: str  # shown once, never stored


def key_generate(kind: str = KEY_PREFIX) -> NewKey:
    prefix = kind + secrets.token_hex(_PUBLIC_ID_CHARS // 2)
    plaintext = f"{prefix}-{secrets.token_urlsafe(32)}"
    return NewKey(prefix=prefix, secret_hash=key_hash(plaintext), plaintext=plaintext)


def key_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def key_prefix_of(plaintext: str, kind: str = KEY_PREFIX) -> str | None:
    """The public prefix of a well-formed key of this kind, or None (nothing to look up)."""
    if not plaintext.startswith(kind):
        return None
    public_id, sep, secret = plaintext[len(kind) :].partition("-")
    if not sep or len(public_id) != _PUBLIC_ID_CHARS or len(secret) < 32:
        return None
    return kind + public_id


def key_matches(plaintext: str, secret_hash: str) -> bool:
    return hmac.compare_digest(key_hash(plaintext), secret_hash)
