"""What a provider's groups grant: the config file's `[[sso.groups]]` rules applied to the
groups claim of one sign-in. Pure functions, no database.

A rule names a provider group and what it grants: a `team` with a `role` (member or
admin), `staff`, or both. A member is in one team: the first rule (in file order) that
matches one of their groups and names a team decides it, and they are that team's admin
when any matching rule gives them `admin` there. `staff` from any matching rule makes them
a Sluice admin. Groups no rule names grant nothing; a sign-in whose groups grant nothing
is refused.
"""

import re
from dataclasses import dataclass
from typing import Any

ROLES = ("member", "admin")
_CLAIM_PATH = re.compile(r"[A-Za-z0-9_:\-]+(\.[A-Za-z0-9_:\-]+)*")


class RuleError(ValueError):
    """A rule the config file may not hold; the message names it."""


@dataclass(frozen=True)
class GroupRule:
    group: str
    team: str | None = None
    role: str = "member"
    staff: bool = False


@dataclass(frozen=True)
class Grant:
    team: str | None  # team slug, None for staff without a team
    role: str  # "member" or "admin" in that team
    staff: bool
    matched: tuple[str, ...]  # the groups that granted it
    ignored: tuple[str, ...]  # groups that name another team (a member has one)


def rules_from(raw: Any) -> list[GroupRule]:
    """The `[[sso.groups]]` array, checked: each entry a group and a team or staff."""
    if not isinstance(raw, list):
        raise RuleError("sso.groups must be an array of tables ([[sso.groups]])")
    rules = []
    for i, entry in enumerate(raw):
        where = f"sso.groups[{i}]"
        if not isinstance(entry, dict):
            raise RuleError(f"{where} must be a table")
        unknown = set(entry) - {"group", "team", "role", "staff"}
        if unknown:
            raise RuleError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        group, team = entry.get("group"), entry.get("team")
        role, staff = entry.get("role", "member"), entry.get("staff", False)
        if not isinstance(group, str) or not group.strip():
            raise RuleError(f"{where}: group must be a non-empty string")
        if team is not None and (not isinstance(team, str) or not team):
            raise RuleError(f"{where}: team must be a team's slug")
        if role not in ROLES:
            raise RuleError(f"{where}: role must be one of {', '.join(ROLES)}")
        if not isinstance(staff, bool):
            raise RuleError(f"{where}: staff must be true or false")
        if team is None and not staff:
            raise RuleError(f"{where} ({group}): grants nothing (give it a team or staff = true)")
        rules.append(GroupRule(group=group.strip(), team=team, role=role, staff=staff))
    return rules


def claim_path_check(path: Any) -> str:
    """The groups claim: a name, or a dotted path into nested claims
    (Keycloak's `realm_access.roles`)."""
    if not isinstance(path, str) or not _CLAIM_PATH.fullmatch(path):
        raise RuleError("sso.groups_claim must be a claim name or a dotted path (a.b)")
    return path


def groups_of(claims: dict[str, Any], path: str) -> list[str]:
    """The groups in `claims` at `path`: a list of strings, or one string (some providers
    send a single group bare); anything else is no groups."""
    value: Any = claims
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [g for g in value if isinstance(g, str)]
    return []


def grant_for(groups: list[str], rules: list[GroupRule]) -> Grant | None:
    """What `groups` grant under `rules`, or None when they grant nothing."""
    have = set(groups)
    matching = [r for r in rules if r.group in have]
    if not matching:
        return None
    team = next((r.team for r in matching if r.team is not None), None)
    in_team = [r for r in matching if r.team is not None and r.team == team]
    role = "admin" if any(r.role == "admin" for r in in_team) else "member"
    staff = any(r.staff for r in matching)
    matched = tuple(dict.fromkeys(r.group for r in matching if r.team == team or r.staff))
    ignored = tuple(
        dict.fromkeys(r.group for r in matching if r.team not in (None, team) and not r.staff)
    )
    return Grant(team=team, role=role, staff=staff, matched=matched, ignored=ignored)
