"""Batch files kept in storage: expiry and pruning."""


def test_prune_batch_files_deletes_expired_files_but_not_a_running_batchs_input(
    db: None, tmp_path, settings
) -> None:
    import io
    from datetime import timedelta

    from django.core.files.base import ContentFile
    from django.core.management import call_command
    from django.utils import timezone

    from accounts.models import Application, Team
    from batches.models import Batch, BatchFile
    from batches.storage import batch_storage

    settings.STORAGES = {
        **settings.STORAGES,
        "batches": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path)},
        },
    }
    team = Team.objects.create(slug="t", name="t")
    app = Application.objects.create(team=team, slug="a", name="a")
    past = timezone.now() - timedelta(seconds=1)
    files = {}
    for name in ("expired", "in-use", "live"):
        stored = batch_storage().save(f"{name}.jsonl", ContentFile(b"{}\n"))
        files[name] = BatchFile.objects.create(
            id=f"file-{name}",
            application=app,
            purpose="batch",
            filename=name,
            bytes=3,
            storage_name=stored,
            created_at=past,
            expires_at=past if name != "live" else None,
        )
    Batch.objects.create(
        id="batch-x",
        application=app,
        key_prefix="k",
        endpoint="/v1/chat/completions",
        input_file=files["in-use"],
        completion_window="24h",
        status="in_progress",
        created_at=past,
        expires_at=timezone.now() + timedelta(hours=1),
    )
    out = io.StringIO()
    call_command("prune_batch_files", stdout=out)
    assert "1 expired batch file(s) deleted" in out.getvalue()
    assert set(BatchFile.objects.values_list("id", flat=True)) == {"file-in-use", "file-live"}
    assert not (tmp_path / "expired.jsonl").exists()
