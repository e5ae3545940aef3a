"""The batch line's own index on its batch (and, on PostgreSQL, its `_like` twin): every
index of the line table that begins with the batch serves the same lookups, and each of
the two was written twice a line (claimed, then done: the state is indexed, so neither
update is a heap-only one).

Dropped by name rather than by altering the field: on SQLite an altered field rebuilds the
whole line table."""

from django.db import migrations, models

INDEX = "batches_batchline_batch_id_e434b3b5"


def drop(apps, schema_editor):
    schema_editor.execute(f'DROP INDEX IF EXISTS "{INDEX}"')
    schema_editor.execute(f'DROP INDEX IF EXISTS "{INDEX}_like"')


def create(apps, schema_editor):
    table = '"batches_batchline"'
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{INDEX}" ON {table} ("batch_id")')
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS "{INDEX}_like" ON {table} ("batch_id" varchar_pattern_ops)'
        )


class Migration(migrations.Migration):
    dependencies = [
        ("batches", "0004_batch_counts"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop, create)],
            state_operations=[
                migrations.AlterField(
                    model_name="batchline",
                    name="batch",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="lines",
                        to="batches.batch",
                    ),
                ),
            ],
        ),
    ]
