from django.db import models


class Change(models.Model):
    """A change that drops cached values (core/refresh.py `invalidate`), as the words its
    message carries, for the workers of a deployment without Redis to read
    (core/change_log.py). Only the latest rows are kept."""

    words = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return str(self.words)
