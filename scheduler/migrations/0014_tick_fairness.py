"""Issue 15 section 2: each tick records its fairness sample (per band, per user: running value,
pending tasks, over budget, got a turn; the smallest job left waiting), for the fairness page."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0013_whatif_basis"),
    ]

    operations = [
        migrations.AddField(
            model_name="tickrecord",
            name="fairness",
            field=models.JSONField(default=dict),
        ),
    ]
