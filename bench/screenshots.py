"""Screenshots of the console's main pages into docs/, at laptop width (1366 px).

    .venv/bin/python bench/screenshots.py [--calls 30000] [--out docs]

Seeds a throw-away SQLite database with bench/seed_audit.py (a month of calls; or uses
DATABASE_URL when set, e.g. the 1M-call bench database), records a few admin actions
through the management commands (a limit, a drain), starts the simulator and the gateway
under uvicorn, sends a little live traffic, then logs in through the login form with
headless Chromium as the admin and as a member and saves one PNG per page (the whole page
height). Debian's chromium and chromium-driver must be installed.
"""

import argparse
import base64
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import stack  # noqa: E402

from tests.console.browser import WINDOW, Console, start_chromium, stop_chromium  # noqa: E402

PASSWORD = "bench-pass-1"
EMAILS = {"admin": "bench-admin@example.com", "member": "bench-member@example.com"}
# (file name, role, path, what to wait for). Pages not built yet are skipped with a note.
SHOTS = [
    ("console-overview", "admin", "/", "capacity-board"),
    ("console-keys", "member", "/keys/", "keys-table"),
    ("console-limits", "admin", "/limits/", "limits-table"),
    ("console-deployments", "admin", "/deployments/", "deployments-table"),
    ("console-my-usage", "member", "/usage/", "usage-totals"),
    ("console-actions-log", "admin", "/actions/", "actions-table"),
    ("console-capacity-weather", "admin", "/reports/weather/", ""),
    ("console-calls", "admin", "/calls/", "calls"),
    ("console-agents", "admin", "/calls/?view=agents", "agents"),
    ("console-usage-report", "admin", "/reports/?period=month&group_by=member", ""),
    ("console-batches", "admin", "/batches/", "batches-table"),
    ("console-batch", "admin", "/batches/batch_6a1f0c2e9d4b4e7f/", "line-outcomes"),
]
# Batches in several states for the Batches page (written straight to the database: the
# runner's own pace is bench/batch_spare.py's business), one application with a window.
BATCH_SEED = """
from django.utils import timezone
from accounts.models import ApiKey, Application
from batches.models import Batch, BatchFile
from tests.console.batch_data import make_batch
keys = ApiKey.objects.filter(revoked_at=None).select_related("application")
key = keys.filter(application__slug="seed-north-chat").first()
make_batch(key, "batch_6a1f0c2e9d4b4e7f", completed=412, failed=9, running=8, pending=571)
done = make_batch(key, "batch_91be33d5c0e24a08", status="completed", completed=250, failed=3)
for kind, size in (("output", 182_344), ("error", 2_115)):
    f = BatchFile.objects.create(id=f"file-{kind}-91be33d5", application_id=key.application_id,
        purpose="batch_output", filename=f"{done.id}_{kind}.jsonl", bytes=size,
        storage_name="-", created_at=timezone.now())
    setattr(done, f"{kind}_file", f)
done.save()
failed = make_batch(key, "batch_0f4e8a7b6c5d4e3f", status="failed")
Batch.objects.filter(pk=failed.pk).update(total=120, errors=[{"code": "duplicate_custom_id",
    "message": "custom_id 'q-17' is used on lines 17 and 42", "line": 42}])
nightly = keys.filter(application__slug="seed-north-nightly").first() or key
Application.objects.filter(pk=nightly.application_id).update(batch_windows="01:00-06:00")
make_batch(nightly, "batch_2c7d90b13aa84f15", pending=2000)
"""


def shoot(console: Console, path: str, wait_for: str, out: Path) -> str:
    from selenium.webdriver.common.by import By

    console.open(path)
    if console.status_of(path) != 200:
        return f"skipped {path}: {console.status_of(path)}"
    if wait_for:
        console.wait(
            lambda d: d.find_elements(By.CSS_SELECTOR, f"[data-testid='{wait_for}']"),
            wait_for,
        )
    # The whole page, not only the window: Chromium renders beyond the viewport.
    size = console.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    width, height = WINDOW[0], min(int(size["height"]), 6000)
    shot = console.driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    out.write_bytes(base64.b64decode(shot["data"]))
    return f"{out} ({height} px high)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30_000)
    parser.add_argument("--out", default=str(ROOT / "docs"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)

    with stack() as s:
        # The script logs in as each role several times a minute: past the login throttle.
        s.env |= {"SLUICE_LOGIN_RATE_ADDRESS": "1000/m", "SLUICE_LOGIN_RATE_ACCOUNT": "1000/m"}
        sim = s.simulator("--model", "big:4", "--model", "medium:16", "--model", "small:64")
        config = tomllib.loads((ROOT / "config" / "demo.toml").read_text())
        demo = (ROOT / "config" / "demo.toml").read_text()
        demo = demo.replace(config["upstreams"][0]["base_url"], f"{sim}/v1")
        (s.tmp / "demo.toml").write_text(demo)
        s.manage("migrate", "-v0")
        s.manage("apply_config", str(s.tmp / "demo.toml"))
        if "DATABASE_URL" not in os.environ:
            subprocess.run(
                [
                    sys.executable,
                    "bench/seed_audit.py",
                    "--calls",
                    str(args.calls),
                    "--rollups",
                    "0",
                    "--password",
                    PASSWORD,
                ],
                cwd=ROOT,
                env=s.env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        s.manage(
            "set_limit", "member", EMAILS["member"], "--rpm", "120", "--daily-tokens", "5000000"
        )
        # Monthly budgets: the Limits page and the Overview show their month-end forecast.
        s.manage("set_limit", "member", EMAILS["member"], "--monthly-cost", "40")
        s.manage("set_limit", "application", "seed-north-chat", "--monthly-cost", "900")
        s.manage("drain", "medium", "--minutes", "30")
        s.manage("shell", "-c", BATCH_SEED)
        try:
            key = s.issue_key(EMAILS["member"], "seed-north-chat")
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"issue_key failed: {exc.stderr}") from exc
        base, _ = s.gateway()
        with httpx.Client(base_url=f"{base}/v1", headers={"Authorization": f"Bearer {key}"}) as c:
            for model in ("smart", "fast", "smart", "fast", "smart"):
                c.post(
                    "/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                )

        driver = start_chromium()
        try:
            console = Console(driver, base, EMAILS, PASSWORD)
            for name, role, path, wait_for in SHOTS:
                console.login(role)
                print(shoot(console, path, wait_for, out / f"{name}.png"))
        finally:
            stop_chromium(driver)


if __name__ == "__main__":
    main()
