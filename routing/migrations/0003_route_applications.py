# The grant of routes to applications moves from accounts (Application.routes, made by
# accounts/0002 before 2026-11-30) to routing (Route.applications), keeping its table, so
# accounts' migrations no longer depend on routing's. A database that ran the old
# accounts/0002 has the table and its rows already: only the state changes. A new one gets
# the table here.

from django.db import migrations, models


class AddGrantUnlessItsTableExists(migrations.AddField):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        model = to_state.apps.get_model(app_label, self.model_name)
        table = model._meta.get_field(self.name).remote_field.through._meta.db_table
        if table in schema_editor.connection.introspection.table_names():
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_initial'),
        ('routing', '0002_priority_queue'),
    ]

    operations = [
        AddGrantUnlessItsTableExists(
            model_name='route',
            name='applications',
            field=models.ManyToManyField(blank=True, db_table='accounts_application_routes', related_name='routes', to='accounts.application'),
        ),
    ]
