"""The people the console tests log in as: one per role, in two teams.

Used both by the browser tests (committed rows, real passwords, a live gateway) and by the
permission matrix (Django's test client, rows inside the test's transaction)."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model

from accounts.models import ApiKey, Application, Member, Team
from accounts.services import key_issue

PASSWORD = "console-test-pass-7"

ROLES = ("member", "other_member", "team_admin", "other_team_admin", "staff")


@dataclass
class People:
    """Team `home` (the demo team or a fresh one) and team `rival`, with their people,
    applications and one key each for the members."""

    home: Team
    rival: Team
    home_app: Application
    rival_app: Application
    users: dict[str, object]  # role -> User
    keys: dict[str, ApiKey]  # "member" | "member_peer" | "rival_member" -> a key of theirs
    # "member_peer": another member of the member's own team (not visible to the member)

    def email(self, role: str) -> str:
        return self.users[role].email


def _user(email: str, *, password: str | None, is_staff: bool = False):
    User = get_user_model()
    user = User(username=email, email=email, is_staff=is_staff, is_superuser=is_staff)
    if password:
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    return user


def make_people(*, tag: str, password: str | None = None, home: Team | None = None) -> People:
    """Create everyone, emails ending in `-{tag}@example.com` so several sets can live in one
    database; no name is a substring of another, so pages can be searched for them.
    `home` reuses an existing team (the browser tests use the demo team, whose application
    reaches the live simulator)."""

    def email(name: str) -> str:
        return f"{name}-{tag}@example.com"

    if home is None:
        home = Team.objects.create(slug=f"home-{tag}", name=f"Home {tag}")
    rival = Team.objects.create(slug=f"rival-{tag}", name=f"Rival {tag}")
    home_app = home.applications.first() or Application.objects.create(
        team=home, slug=f"home-app-{tag}", name=f"Home app {tag}"
    )
    rival_app = Application.objects.create(team=rival, slug=f"rival-app-{tag}", name="Rival app")

    users = {}
    members = {}
    for role, name, team, member_role in (
        ("member", "alice", home, Member.Role.MEMBER),
        ("member_peer", "bob", home, Member.Role.MEMBER),
        ("team_admin", "tina", home, Member.Role.ADMIN),
        ("other_member", "carl", rival, Member.Role.MEMBER),
        ("other_team_admin", "olga", rival, Member.Role.ADMIN),
    ):
        users[role] = _user(email(name), password=password)
        members[role] = Member.objects.create(user=users[role], team=team, role=member_role)
    users["staff"] = _user(email("sam"), password=password, is_staff=True)

    keys = {}
    for label, role, app in (
        ("member", "member", home_app),
        ("member_peer", "member_peer", home_app),
        ("rival_member", "other_member", rival_app),
    ):
        keys[label], _ = key_issue(
            member_email=users[role].email, application_slug=app.slug, name=f"{label} key"
        )
    return People(home, rival, home_app, rival_app, users, keys)
