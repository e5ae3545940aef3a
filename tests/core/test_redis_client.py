"""REDIS_URL: one server, or a primary behind Sentinel (`redis+sentinel://`)."""

import pytest

from core.redis_client import SentinelTarget, cache_location, sentinel_target


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("redis://127.0.0.1:6379/0", None),
        ("rediss://:pw@cache:6380/1", None),
        (
            "redis+sentinel://s1:26379,s2:26380/mymaster/3",
            SentinelTarget((("s1", 26379), ("s2", 26380)), "mymaster", 3),
        ),
        (
            "redis+sentinel://:sec%40ret@s1,[::1]:26390/main?sentinel_password=x",
            SentinelTarget(
                (("s1", 26379), ("::1", 26390)), "main", 0, None, "sec@ret", sentinel_password="x"
            ),
        ),
        (
            "redis+sentinel://app:pw@s1:1/m/0",
            SentinelTarget((("s1", 1),), "m", 0, username="app", password="pw"),
        ),
    ],
)
def test_sentinel_urls_name_their_sentinels_master_and_database(url, target):
    assert sentinel_target(url) == target


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://s1:26379", "redis+sentinel://s1:x/m", "redis+sentinel://s1/m/zero"],
)
def test_a_sentinel_url_missing_its_parts_is_refused(url):
    with pytest.raises(ValueError, match="REDIS_URL"):
        sentinel_target(url)


def test_a_sentinel_url_is_one_cache_location_not_one_per_comma():
    assert cache_location("redis://h:6379/0") == {"LOCATION": "redis://h:6379/0"}
    location = cache_location("redis+sentinel://a:1,b:2/m/0")
    assert location["LOCATION"] == ["redis+sentinel://a:1,b:2/m/0"]
    assert location["OPTIONS"]["pool_class"] == "core.redis_client.UrlConnectionPool"
