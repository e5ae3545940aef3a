"""Settings with accounts' migrations as they were before routing took the application/route
grant over (accounts/0002 made the table then): for testing that an existing database keeps
its grants when it migrates."""

from config.settings import *  # noqa: F403

# Only the apps that existed then, routing's history as it was then (later migrations of
# routing depend on later ones of accounts, which this history does not have).
INSTALLED_APPS = [app for app in INSTALLED_APPS if app not in ("batches", "console", "api")]  # noqa: F405
MIGRATION_MODULES = {
    "accounts": "tests.old_migrations.accounts.migrations",
    "routing": "tests.old_migrations.routing.migrations",
}
ROOT_URLCONF = "tests.old_migrations.urls"  # the pages of apps left out above would not load
