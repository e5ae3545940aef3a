"""A real OpenID Connect provider for the single sign-on tests: npm `oidc-provider` (pinned in
tests/support/oidc/install.sh, installed into .oidc-provider/ when missing) run by
tests/support/oidc/provider.mjs, and a plain-HTTP driver for its development login pages.
No Django import.

The issuer is `http://localhost:<port>` (listening on 127.0.0.1): a browser keeps its cookies
apart from the gateway's on 127.0.0.1. The caller picks the port, since the gateway is
started first with the issuer URL (it only contacts the provider at the first login)."""

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from tests.support.processes import ROOT, start_process, stop_process

HERE = ROOT / "tests" / "support" / "oidc"
INSTALL = HERE / "install.sh"
SCRIPT = HERE / "provider.mjs"


def oidc_skip_reason() -> str | None:
    """Why the provider cannot run here (tests skip with it), or None once it is installed."""
    if os.environ.get("SLUICE_SKIP_OIDC_TESTS", "").strip().lower() in {"1", "true", "yes"}:
        return "OIDC tests off: SLUICE_SKIP_OIDC_TESTS=1"
    return _install()


@cache  # once a session: install.sh is quick when installed, but still a shell and a grep
def _install() -> str | None:
    if shutil.which("node") is None:
        return "the OIDC tests need Node.js (node is not on PATH)"
    if shutil.which("npm") is None:
        return "the OIDC tests need npm to install oidc-provider"
    try:
        done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "installing oidc-provider from npm took over 5 minutes"
    if done.returncode != 0:
        return "npm could not install oidc-provider: " + (done.stderr or done.stdout)[-300:]
    return None


@dataclass
class OidcProviderHandle:
    url: str  # base URL; the provider is mounted at its root, so also the issuer
    client_id: str
    client_secret: str
    accounts_path: Path

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/.well-known/openid-configuration"

    def accounts(self) -> dict[str, dict[str, Any]]:
        return json.loads(self.accounts_path.read_text())

    def set_account(self, sub: str, claims: dict[str, Any]) -> None:
        """Add or replace an account; the provider reads the file at every look-up."""
        _write_json(self.accounts_path, self.accounts() | {sub: claims})

    def set_groups(self, sub: str, groups: list[str]) -> None:
        self.set_account(sub, self.accounts()[sub] | {"groups": groups})


def _write_json(path: Path, data: Any) -> None:
    # Whole or not at all: the provider may read it at any moment.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def start_oidc_provider(
    port: int,
    *,
    redirect_uris: list[str],
    accounts: dict[str, dict[str, Any]],
    client_id: str = "sluice",
    client_secret: str = "sluice-oidc-test-secret",
    token_endpoint_auth_method: str = "client_secret_basic",
    code_ttl_seconds: int = 60,
    wrong_audience: bool = False,
    stderr: Any = None,
) -> Iterator[OidcProviderHandle]:
    """Yields a running provider on 127.0.0.1:`port` with one confidential client (PKCE
    required) and `accounts` ({sub: claims}); stops it when resumed (`yield from` it in a
    fixture). `wrong_audience`: the token endpoint's ID tokens carry aud "someone-else",
    still signed with the provider's key."""
    workdir = Path(tempfile.mkdtemp(prefix="sluice-oidc-"))
    accounts_path = workdir / "accounts.json"
    _write_json(accounts_path, accounts)
    url = f"http://localhost:{port}"
    client = {
        "client_id": client_id,
        "client_secret": client_secret,
        "redirect_uris": redirect_uris,
        "token_endpoint_auth_method": token_endpoint_auth_method,
    }
    args = [
        "node",
        str(SCRIPT),
        "--port", str(port),
        "--issuer", url,
        "--client", json.dumps(client),
        "--accounts", str(accounts_path),
        "--code-ttl", str(code_ttl_seconds),
        *(["--wrong-audience"] if wrong_audience else []),
    ]  # fmt: skip
    proc = start_process(
        args,
        url=f"{url}/.well-known/openid-configuration",
        stderr=stderr,
    )
    try:
        yield OidcProviderHandle(url, client_id, client_secret, accounts_path)
    finally:
        stop_process(proc)
        shutil.rmtree(workdir, ignore_errors=True)


Client = Any  # an httpx.Client or a requests.Session: the cookies carry the provider's session

_FORM = re.compile(r'<form[^>]*\baction="([^"]+)"[^>]*>(.*?)</form>', re.S)
_PROMPT = re.compile(r'name="prompt"\s+value="([^"]+)"')


def drive_login(client: Client, authorize_url: str, login: str, *, max_steps: int = 10) -> str:
    """Go through the provider's development pages from `authorize_url` as `login` (any
    password) and return the final redirect to the client's redirect_uri (with `code` and
    `state`, or `error`) without requesting it.

    The provider's session lives in `client`'s cookies: a second login through the same
    client is silent (single sign-on) and stays the first user, so use a fresh client per
    user. Any login name signs in; one not in the accounts has no claims but `sub`.
    There is no consent page: the provider grants its one client whatever it asks for."""
    redirect_uri = parse_qs(urlsplit(authorize_url).query)["redirect_uri"][0]
    response = _send(client, "GET", authorize_url)
    for _ in range(max_steps):
        if response.status_code in (301, 302, 303, 307, 308):
            location = urljoin(str(response.url), response.headers["location"])
            if location.startswith(redirect_uri):
                return location
            response = _send(client, "GET", location)
            continue
        form = _FORM.search(response.text) if response.status_code == 200 else None
        if form is None:
            raise AssertionError(
                f"no form and no redirect from the provider: {response.status_code} "
                f"{response.text[:500]}"
            )
        action = urljoin(str(response.url), html.unescape(form.group(1)))
        prompt = _PROMPT.search(form.group(2))
        if prompt and prompt.group(1) == "login":
            data = {"prompt": "login", "login": login, "password": "any"}
        elif prompt and prompt.group(1) == "consent":
            data = {"prompt": "consent"}
        else:
            raise AssertionError(f"an unknown form from the provider: {form.group(0)[:500]}")
        response = _send(client, "POST", action, data=data)
    raise AssertionError(f"no redirect to {redirect_uri} after {max_steps} steps")


def _send(client: Client, method: str, url: str, data: dict[str, str] | None = None) -> Any:
    if isinstance(client, httpx.Client):
        return client.request(method, url, data=data, follow_redirects=False)
    return client.request(method, url, data=data, allow_redirects=False)  # requests.Session
