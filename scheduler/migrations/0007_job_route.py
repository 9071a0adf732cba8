"""``Job.backend`` becomes ``Job.route``: where a job's tasks run ("workers" or "kubernetes"),
no longer named like ``Worker.backend`` (the backend that runs one worker's attempts). The
column is renamed in place; its values stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0006_drop_redundant_fk_indexes")]

    operations = [migrations.RenameField(model_name="job", old_name="backend", new_name="route")]
