import asyncio

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from routing.catalog.specs import DeploymentSpec, catalog
from routing.deployment_state import deployment_state


class Command(BaseCommand):
    help = "Each deployment's breaker, effective concurrency limit, requests in flight and "
    help += "waiting by class, as every worker sees them (Redis); without REDIS_URL only this "
    help += "process's view."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reset", metavar="DEPLOYMENT", help="forget a deployment's state")

    def handle(self, *args: object, reset: str | None, **options: object) -> None:
        asyncio.run(self._run(reset))

    async def _run(self, reset: str | None) -> None:
        state = deployment_state()
        if reset:
            await state.reset(reset)
            self.stdout.write(f"forgot the state of {reset}")
            return
        if not settings.REDIS_URL:
            self.stderr.write("REDIS_URL is not set: workers keep their own state, not shown here")
        deployments: dict[str, DeploymentSpec] = {}
        for route in (await catalog.routes()).values():
            deployments.update((d.name, d) for d in route.chain)
        now = timezone.now().timestamp()
        self.stdout.write(
            f"{'deployment':20}{'breaker':12}{'limit':>8}{'max':>6}{'in flight':>11}"
            f"{'of it batch':>13}{'waiting i/b':>13}{'oldest wait':>13}  notes"
        )
        for name, d in sorted(deployments.items()):
            snap = await state.snapshot(name, d.limits)
            notes = []
            if snap.mode == "open":
                notes.append(f"open {snap.open_for:.0f} s more ({snap.reason})")
            if d.drained(now):
                notes.append(f"drained {d.drained_until - now:.0f} s more")
            waiting = f"{snap.waiting_interactive}/{snap.waiting_batch}"
            self.stdout.write(
                f"{name:20}{snap.mode:12}{snap.limit:8.0f}{d.max_concurrency:6}"
                f"{snap.in_flight:11}{snap.batch_in_flight:13}{waiting:>13}"
                f"{snap.oldest_wait:12.1f}s  {'; '.join(notes)}"
            )
