"""What a refreshing cache (core/refresh.py) loads from, in tests of when it reloads."""


class Source:
    """What the database holds; counts the reads."""

    def __init__(self, value: str) -> None:
        self.value, self.reads = value, 0

    async def load(self) -> str:
        self.reads += 1
        return self.value
