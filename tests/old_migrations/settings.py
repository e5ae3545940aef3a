"""Settings with accounts' migrations as they were before routing took the application/route
grant over (accounts/0002 made the table then): for testing that an existing database keeps
its grants when it migrates."""

from config.settings import *  # noqa: F403

MIGRATION_MODULES = {"accounts": "tests.old_migrations.accounts.migrations"}
