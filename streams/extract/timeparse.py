"""Timestamps and hosts written inside log lines (slurmctld, syslog, glog/PyTorch)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_ISO = re.compile(r"^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{1,9})?)(Z|[+-]\d\d:?\d\d)?\]?")
_SYSLOG = re.compile(
    r"^(?:<\d+>)?(?P<ts>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d) "
    r"(?P<host>[A-Za-z0-9][\w.\-]*) (?P<tag>[\w./\-]+)(?:\[\d+\])?: "
)


def _iso(text: str, tz: str | None) -> datetime | None:
    frac = ""
    if "." in text:
        text, frac = text.split(".", 1)
        frac = "." + frac[:6]
    try:
        dt = datetime.fromisoformat(text.replace(" ", "T") + frac)
    except ValueError:
        return None
    if tz and tz != "Z":
        try:
            return datetime.fromisoformat(dt.isoformat() + tz).astimezone(UTC)
        except ValueError:
            return dt.replace(tzinfo=UTC)
    return dt.replace(tzinfo=UTC)


def line_time_and_host(text: str, now: datetime) -> tuple[datetime | None, str | None]:
    """The absolute time and host a line carries in its own prefix, if any.

    Times without a zone are read as UTC; a syslog time has no year, so the year
    that puts it nearest to ``now`` is taken.
    """
    m = _ISO.match(text)
    if m:
        return _iso(m.group(1), m.group(2)), None
    s = _SYSLOG.match(text)
    if s:
        host = s.group("host")
        try:
            naive = datetime.strptime(f"{now.year} {s.group('ts')}", "%Y %b %d %H:%M:%S")  # noqa: DTZ007
        except ValueError:
            return None, host
        dt = naive.replace(tzinfo=UTC)
        if (dt - now).days > 180:
            dt = dt.replace(year=now.year - 1)
        return dt, host
    return None, None


def parse_rfc3339(text: str) -> datetime | None:
    """RFC 3339 with up to nanoseconds (Python keeps microseconds)."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$", text)
    if not m:
        return None
    frac = f".{m.group(2)[:6]}" if m.group(2) else ""
    zone = m.group(3) or "Z"
    try:
        dt = datetime.fromisoformat(m.group(1) + frac + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None
    return dt.astimezone(UTC)
