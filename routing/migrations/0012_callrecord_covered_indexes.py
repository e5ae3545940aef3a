"""The single-column indexes on a call's member, application and key prefix, each the
first column of an index with time: every index is written on every call, and these three
served no lookup the others do not.

Dropped by name rather than by altering the fields: on SQLite an altered field rebuilds the
whole audit table. On PostgreSQL the key prefix keeps its `_like` index (the call
explorer's prefix filter under any collation)."""

import django.db.models.deletion
from django.db import migrations, models

DROPPED = {
    "routing_callrecord_member_id_0efbda09": "member_id",
    "routing_callrecord_application_id_b1c56eaa": "application_id",
    "routing_callrecord_key_prefix_5604a892": "key_prefix",
}


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_sso"),
        ("routing", "0011_callrecord_outcome_database_unavailable"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    f'CREATE INDEX IF NOT EXISTS "{name}" ON "routing_callrecord" ("{column}")',
                )
                for name, column in DROPPED.items()
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="callrecord",
                    name="application",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="accounts.application",
                    ),
                ),
                migrations.AlterField(
                    model_name="callrecord",
                    name="key_prefix",
                    field=models.CharField(blank=True, max_length=40),
                ),
                migrations.AlterField(
                    model_name="callrecord",
                    name="member",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="accounts.member",
                    ),
                ),
            ],
        )
    ]
