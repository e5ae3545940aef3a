from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0007_call_protocols"),
    ]

    operations = [
        migrations.AddField(
            model_name="callrecord",
            name="cache",
            field=models.CharField(
                blank=True,
                help_text="The response cache: hit (answered from it, no upstream attempt), "
                "miss or bypass; blank when the application has no cache.",
                max_length=8,
            ),
        ),
    ]
