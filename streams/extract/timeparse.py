"""Timestamps and hosts written inside log lines (slurmctld, syslog, dmesg -T, glog/PyTorch)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_ISO = re.compile(r"^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{1,9})?)(Z|[+-]\d\d:?\d\d)?\]?")
_SYSLOG = re.compile(
    r"^(?:<\d+>)?(?P<ts>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d) "
    r"(?P<host>[A-Za-z0-9][\w.\-]*) (?P<tag>[\w./\-]+)(?:\[\d+\])?: "
)

# `dmesg -T` (and journalctl's short-full): "[Fri Nov 13 21:09:18 2026] NVRM: Xid ..."; the year
# is written, the zone is not (read as UTC like every zoneless time here)
_DMESG_T = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<ts>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"[ \d]\d \d\d:\d\d:\d\d \d{4})\]"
)
# glog, as PyTorch's C++ side and torchrun write it: "E1107 02:44:10.600036839 4711 file.cpp:616] ...",
# also behind a "[rank3]:" label and in brackets; month and day without a year, and PyTorch's c10
# logger leaves a one-digit month unpadded ("[E704 13:48:58.120 ...]" is 4 July)
_GLOG = re.compile(
    r"^(?:\[rank\d+\]:)?\[?[IWEF](?P<month>\d{1,2})(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)"
    r"(?:\.(?P<frac>\d{1,9}))? +(?:\d+ +)?[\w./\-]+:\d+\]"
)


def _nearest_year(naive: datetime, now: datetime) -> datetime:
    """A time written without its year: the year that puts it nearest to ``now``."""
    dt = naive.replace(tzinfo=UTC)
    if (dt - now).days > 180:
        return dt.replace(year=dt.year - 1)
    if (now - dt).days > 180:
        return dt.replace(year=dt.year + 1)
    return dt


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
        return _nearest_year(naive, now), host
    return None, None


def local_clock_time(text: str, now: datetime) -> datetime | None:
    """The time of a ``dmesg -T`` or glog prefix: the host's local clock with no zone (read as UTC).

    Only for lines with no better time: a shipper's record time carries its zone, these do not
    (a host on local time would be hours off), so the extractor asks here last.
    """
    if text.startswith("["):
        d = _DMESG_T.match(text)
        if d:
            try:
                return datetime.strptime(d.group("ts"), "%b %d %H:%M:%S %Y").replace(tzinfo=UTC)
            except ValueError:
                return None
    g = _GLOG.match(text)
    if g:
        frac = (g.group("frac") or "0")[:6].ljust(6, "0")
        try:
            naive = datetime.strptime(  # noqa: DTZ007 - glog writes no zone: UTC, as above
                f"{now.year}{g.group('month').zfill(2)}{g.group('day')} {g.group('time')}.{frac}",
                "%Y%m%d %H:%M:%S.%f",
            )
        except ValueError:
            return None
        return _nearest_year(naive, now)
    return None


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
