"""Unknown key prefixes are remembered apart from real keys: a client retrying
with a wrong key costs no query after the first, also once the key cache's time is up, and
a flood of made-up prefixes never pushes real keys out."""

import uuid

import pytest

import accounts.authentication as authentication
from accounts.authentication import authenticate, forget_cached_keys
from core.errors import GatewayError


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The database looks for prefixes (the real loaders, counted): one key, or every
    prefix (`*`)."""
    seen: list[str] = []
    real, real_all = authentication._load, authentication._all_prefixes

    def counted(prefix: str):
        seen.append(prefix)
        return real(prefix)

    def counted_all():
        seen.append("*")
        return real_all()

    monkeypatch.setattr(authentication, "_load", counted)
    monkeypatch.setattr(authentication, "_all_prefixes", counted_all)
    forget_cached_keys()
    yield seen
    forget_cached_keys()


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_prefix_is_looked_up_once(loads, settings):
    key = f"sk-sluice-{uuid.uuid4().hex[:12]}-" + "x" * 43
    for _ in range(3):
        with pytest.raises(GatewayError) as refused:
            await authenticate(key)
        assert refused.value.status == 401
        authentication._principals.clear()  # as if SLUICE_KEY_CACHE_SECONDS had passed
    assert len(loads) == 1


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_prefix_is_looked_up_again_once_forgotten(loads, settings):
    settings.SLUICE_UNKNOWN_KEY_CACHE_SECONDS = 0
    key = f"sk-sluice-{uuid.uuid4().hex[:12]}-" + "x" * 43
    for _ in range(2):
        with pytest.raises(GatewayError):
            await authenticate(key)
        authentication._principals.clear()
    assert len(loads) == 2
