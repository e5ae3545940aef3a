"""OpenAI's Batch API: uploaded files, batches, and the lines a batch is made of.

File contents live in Django's storage (batches/storage.py), never in the database; a line
keeps where it sits in its input file, and its answer only until the batch is finalized
into its output and error files.
"""

from django.db import models


class BatchFile(models.Model):
    class Purpose(models.TextChoices):
        BATCH = "batch"
        BATCH_OUTPUT = "batch_output"

    id = models.CharField(max_length=40, primary_key=True)
    application = models.ForeignKey(
        "accounts.Application", on_delete=models.CASCADE, related_name="batch_files"
    )
    member = models.ForeignKey(
        "accounts.Member", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    purpose = models.CharField(max_length=20, choices=Purpose.choices)
    filename = models.CharField(max_length=255)
    bytes = models.BigIntegerField()
    lines = models.PositiveIntegerField(default=0)
    storage_name = models.CharField(max_length=300)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Gone after this (OpenAI's expires_after); null: kept."
    )

    class Meta:
        indexes = [models.Index(fields=["application", "created_at"], name="file_app_time")]

    def __str__(self) -> str:
        return self.id


class Batch(models.Model):
    class Status(models.TextChoices):
        VALIDATING = "validating"
        FAILED = "failed"
        IN_PROGRESS = "in_progress"
        FINALIZING = "finalizing"
        COMPLETED = "completed"
        EXPIRED = "expired"
        CANCELLING = "cancelling"
        CANCELLED = "cancelled"

    id = models.CharField(max_length=40, primary_key=True)
    application = models.ForeignKey(
        "accounts.Application", on_delete=models.CASCADE, related_name="batches"
    )
    member = models.ForeignKey(
        "accounts.Member", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    key_prefix = models.CharField(max_length=40, help_text="The key whose limits the lines use.")
    endpoint = models.CharField(max_length=40)
    input_file = models.ForeignKey(
        BatchFile, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    output_file = models.ForeignKey(
        BatchFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error_file = models.ForeignKey(
        BatchFile, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    completion_window = models.CharField(max_length=10)
    metadata = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    errors = models.JSONField(null=True, blank=True, help_text="Validation errors, per line.")
    total = models.PositiveIntegerField(default=0)
    # A runner validating or finalizing the batch holds it until then.
    held_by = models.CharField(max_length=40, blank=True)
    held_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["application", "created_at"], name="batch_app_time")]

    def __str__(self) -> str:
        return self.id


class BatchLine(models.Model):
    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"  # claimed by a runner until `lease_until`
        DONE = "done"

    # Read as these two ranges of the (batch, state) index: excluding done reads every done
    # line's entry first.
    UNFINISHED = (State.PENDING, State.RUNNING)

    # Looked up through batch_line_unique and the others that begin with the batch.
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines", db_index=False)
    number = models.PositiveIntegerField(help_text="1-based line of the input file.")
    custom_id = models.CharField(max_length=200)
    model = models.CharField(max_length=200)
    offset = models.BigIntegerField(help_text="Where the line starts in the input file.")
    length = models.PositiveIntegerField()
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    claimed_by = models.CharField(max_length=40, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    claims = models.PositiveSmallIntegerField(default=0, help_text="Times a runner took it.")
    failed = models.BooleanField(default=False, help_text="Goes to the error file.")
    result = models.TextField(blank=True, help_text="Its output line, until finalized.")

    class Meta:
        ordering = ["batch", "number"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "number"], name="batch_line_unique"),
            models.UniqueConstraint(fields=["batch", "custom_id"], name="batch_custom_id_unique"),
        ]
        indexes = [
            models.Index(fields=["batch", "state"], name="batch_line_state"),
            # A runner's claim: the lowest pending (or lapsed) lines of one model, read as
            # one range however many of the batch's lines are done.
            models.Index(fields=["batch", "model", "state", "number"], name="batch_line_claim"),
        ]

    def __str__(self) -> str:
        return f"{self.batch_id}:{self.number}"


class BatchCount(models.Model):
    """Lines a runner finished in a batch, answered and failed: what a batch's
    `request_counts` sums, so that reading it counts a few rows rather than every line.
    Written in the transaction that makes the lines done (a line is done once), a row per
    runner so that runners sharing a batch never wait on each other's counts."""

    # Looked up through batch_count_unique, which begins with the batch.
    batch = models.ForeignKey(
        Batch, on_delete=models.CASCADE, related_name="counts", db_index=False
    )
    runner = models.CharField(max_length=40)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["batch", "runner"], name="batch_count_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.batch_id}:{self.runner}"
