"""The attempt's own index on its call (and, on PostgreSQL, the `_like` index beside it):
the unique (call, number) index begins with the call and serves every lookup by call, and
every index is written on every attempt.

Dropped by name rather than by altering the field: on SQLite an altered field rebuilds the
whole table."""

import django.db.models.deletion
from django.db import migrations, models

INDEX = "routing_attempt_call_id_93accc61"


def drop(apps, schema_editor):
    for name in (INDEX, f"{INDEX}_like"):
        schema_editor.execute(f'DROP INDEX IF EXISTS "{name}"')


def create(apps, schema_editor):
    schema_editor.execute(f'CREATE INDEX IF NOT EXISTS "{INDEX}" ON "routing_attempt" ("call_id")')
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS "{INDEX}_like" ON "routing_attempt" '
            '("call_id" varchar_pattern_ops)'
        )


class Migration(migrations.Migration):
    dependencies = [("routing", "0012_callrecord_covered_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop, create)],
            state_operations=[
                migrations.AlterField(
                    model_name="attempt",
                    name="call",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempts",
                        to="routing.callrecord",
                    ),
                ),
            ],
        )
    ]
