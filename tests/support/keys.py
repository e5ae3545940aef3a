"""What the `issue_key` fixture hands a test: a new member's key, shown once."""

from dataclasses import dataclass


@dataclass
class IssuedKey:
    plaintext: str
    prefix: str
    email: str
